// Host locks (src/hostlock): flock(2) on a lock file the caller opened.
//   flockTry(fd)                        -> boolean (taken; false: someone holds it)
//   flockWait(fd, timeoutMs, subject)   -> Promise<boolean> (taken; false: timed out)
//
// Why flock: a blocked flock(LOCK_EX) sleeps in the kernel, queued behind the
// holder, so a waiter costs no CPU. Since Linux 5.0 blocked requests form a
// tree: a new waiter that conflicts with an earlier waiter sleeps behind that
// waiter, and a release wakes only the first, so waiters take the lock in
// arrival order. /proc/locks names the pid that took a flock lock (an OFD
// lock shows -1 there), which is how a bounded wait names the holder.
//
// How the wait is bounded: flock has no timeout, and closing the fd from
// another thread does not wake a sleeping request (it holds its own reference
// to the file). A signal does: with a handler installed without SA_RESTART,
// the sleep returns EINTR. So the waiting thread arms a POSIX timer of its own
// (timer_create with SIGEV_THREAD_ID: the signal goes to that thread only; no
// alarm(), no process-wide SIGALRM) for the deadline, re-firing every
// kReArmMs after it, so a signal that lands just before flock() starts to
// sleep is followed by another. The thread blocks every other signal, so
// nothing else (a spawned child's SIGCHLD, ...) interrupts the wait and sends
// it to the back of the queue.
//
// An environment torn down while a thread waits (a worker terminated; the main
// thread's process.exit() tears nothing down) finalizes the threadsafe
// function: the finalizer cancels the wait the same way (a flag, then the
// signal until the thread is out of flock) and joins, so teardown does not sit
// out the deadline; the thread then tells no one.
//
// Why a thread of its own per blocked wait rather than the libuv threadpool
// (an AsyncWorker): a wait may last up to a minute, and the pool's 4 threads
// are shared with fs, dns, crypto and this addon's async netlink and nftables
// calls; waiters filling the pool would stall the very holder they wait for
// whenever its work needs the pool. A thread is only made when the lock is
// contended (callers try flockTry first), and it ends with the wait.
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <mutex>
#include <string>
#include <thread>

#include "bind/args.h"
#include "bind/ops.h"

#ifndef sigev_notify_thread_id
#define sigev_notify_thread_id _sigev_un._tid
#endif

namespace np {

namespace {

constexpr long kReArmMs = 5;

// A realtime signal nothing in Node, V8 or libuv uses; only the waiting
// threads ever receive it (thread-directed timers), and its handler does
// nothing: the point is the EINTR.
int wakeSignal() { return SIGRTMIN + 5; }

void noop(int) {}

bool installHandler(int& err) {
  static std::once_flag once;
  static int failed = 0;
  std::call_once(once, [] {
    struct sigaction sa {};
    sa.sa_handler = noop;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0;  // no SA_RESTART: the sleeping flock must return EINTR
    if (sigaction(wakeSignal(), &sa, nullptr) != 0) failed = errno;
  });
  err = failed;
  return failed == 0;
}

timespec msToTs(long ms) {
  timespec t{};
  t.tv_sec = ms / 1000;
  t.tv_nsec = (ms % 1000) * 1000000L;
  return t;
}

long long nowMs() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<long long>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

struct FlockWait;
void settle(Napi::Env env, Napi::Function, FlockWait* ctx, FlockWait* w);
using Tsfn = Napi::TypedThreadSafeFunction<FlockWait, FlockWait, settle>;

struct FlockWait {
  FlockWait(Napi::Env env, int f, uint32_t t, std::string s)
      : deferred(Napi::Promise::Deferred::New(env)), fd(f), timeoutMs(t), subject(std::move(s)) {}
  Napi::Promise::Deferred deferred;
  int fd;
  uint32_t timeoutMs;
  std::string subject;
  Tsfn tsfn;
  std::thread thread;
  // Written by the thread before it hands over, read on the JS thread after.
  bool locked = false;
  NlError err;
  // Set by the finalizer when the environment goes away mid-wait.
  std::atomic<bool> cancelled{false};
  // Set by the thread once it no longer sleeps in flock.
  std::atomic<bool> finished{false};

  void run() {
    sigset_t others;
    sigfillset(&others);
    sigdelset(&others, wakeSignal());
    pthread_sigmask(SIG_SETMASK, &others, nullptr);
    wait();
    finished = true;
    // napi_closing: the environment is being torn down; the function must not be used again.
    if (!cancelled && tsfn.BlockingCall(this) == napi_ok) tsfn.Release();
  }

  // On the JS thread, from the finalizer: end a wait still in progress, then join.
  void stop() {
    cancelled = true;
    while (!finished) {
      pthread_kill(thread.native_handle(), wakeSignal());
      timespec t{0, 1000000};
      nanosleep(&t, nullptr);
    }
    if (thread.joinable()) thread.join();
  }

  void wait() {
    sigevent sev{};
    sev.sigev_notify = SIGEV_THREAD_ID;
    sev.sigev_signo = wakeSignal();
    sev.sigev_notify_thread_id = static_cast<pid_t>(syscall(SYS_gettid));
    timer_t timer;
    if (timer_create(CLOCK_MONOTONIC, &sev, &timer) != 0) return err.set(errno, "timer_create", subject);
    const long long deadline = nowMs() + timeoutMs;
    itimerspec its{};
    // it_value 0 would disarm the timer: a zero timeout fires at once instead.
    its.it_value = timeoutMs ? msToTs(timeoutMs) : timespec{0, 1};
    its.it_interval = msToTs(kReArmMs);
    if (timer_settime(timer, 0, &its, nullptr) != 0) {
      err.set(errno, "timer_settime", subject);
    } else {
      for (;;) {
        if (::flock(fd, LOCK_EX) == 0) {
          locked = true;
          break;
        }
        if (errno != EINTR) {
          err.set(errno, "flock", subject);
          break;
        }
        if (cancelled || nowMs() >= deadline) break;
      }
    }
    timer_delete(timer);
  }
};

void settle(Napi::Env env, Napi::Function, FlockWait*, FlockWait* w) {
  if (env == nullptr) return;  // the environment is going away: nobody to tell
  if (w->err.failed()) {
    rejectWithNlError(env, w->deferred, w->err);
  } else {
    w->deferred.Resolve(Napi::Boolean::New(env, w->locked));
  }
}

}  // namespace

Napi::Value FlockTry(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "flockTry");
  uint32_t fd;
  if (!a.uint(info[0], "fd", 0, 0x7fffffff, fd)) return env.Undefined();
  if (::flock(static_cast<int>(fd), LOCK_EX | LOCK_NB) == 0) return Napi::Boolean::New(env, true);
  if (errno == EWOULDBLOCK) return Napi::Boolean::New(env, false);
  NlError e;
  e.set(errno, "flock", "fd " + std::to_string(fd));
  throwNlError(env, e);
  return env.Undefined();
}

Napi::Value FlockWaitAsync(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "flockWait");
  uint32_t fd, timeoutMs;
  std::string subject;
  if (!a.uint(info[0], "fd", 0, 0x7fffffff, fd) || !a.uint(info[1], "timeoutMs", 0, 24 * 3600 * 1000, timeoutMs) ||
      !a.string(info[2], "subject", subject))
    return env.Undefined();
  int herr = 0;
  if (!installHandler(herr)) {
    NlError e;
    e.set(herr, "sigaction", subject);
    throwNlError(env, e);
    return env.Undefined();
  }
  auto* w = new FlockWait(env, static_cast<int>(fd), timeoutMs, subject);
  Napi::Promise promise = w->deferred.Promise();
  // The threadsafe function keeps the event loop alive while the thread waits
  // (a per-exec plugin waiting for the lock must not exit), and its finalizer,
  // on the JS thread once the thread released it, joins and frees.
  w->tsfn = Tsfn::New(env, "netplugin:flockWait", 0, 1, w, [](Napi::Env, void*, FlockWait* ctx) {
    ctx->stop();
    delete ctx;
  });
  w->thread = std::thread([w] { w->run(); });
  return promise;
}

}  // namespace np
