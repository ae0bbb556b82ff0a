// netplugin CNI shim: the executable the container runtime runs as
// /opt/cni/bin/netplugin and /opt/cni/bin/netplugin-ipam. It has no CNI logic:
// it forwards the environment and stdin to the resident agent (netplugin-node)
// over a unix socket and relays the agent's stdout and exit code, so a pod ADD
// costs no Node start. Without an agent it execs the per-exec Node entry with
// the same input. Protocol: src/agent/protocol.ts (the two must agree).
//
// Built static (-static -O2 -s) so it runs on any host, whatever its libc.
// No iostreams, no exceptions: plain syscalls, one heap buffer type.

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

namespace {

#ifndef NETPLUGIN_VERSION
#define NETPLUGIN_VERSION "unknown"  // scripts/build-shim passes the package version
#endif

const char kDefaultSocket[] = "/var/run/netplugin/cni.sock";
const long kDefaultTimeoutMs = 120000;
// Protocol version 2: the answer is a binary frame (version 1 answered JSON).
// Requests and answers carry the same version; src/agent/protocol.ts must agree.
const unsigned char kVersion = 2;
const unsigned char kMagic[4] = {'N', 'P', 'C', kVersion};  // a request
const unsigned char kResponseMagic[3] = {'N', 'P', 'R'};      // an answer
const unsigned char kAccepted = 0x06;
const size_t kResponseHeader = 13;
const uint64_t kMaxAnswer = 64u << 20;  // stdout + stderr; MAX_RESPONSE in protocol.ts

struct Buf {
  char* p = nullptr;
  size_t n = 0, cap = 0;
};

const char* gPlugin = "netplugin";
char gCniVersion[32] = "1.0.0";
long gTimeoutMs = kDefaultTimeoutMs;
int64_t gDeadline = 0;

// Blocking-style write that also copes with a non-blocking pipe from the runtime.
void writeAll(int fd, const char* p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0 && errno == EAGAIN) {
      struct pollfd pf = {fd, POLLOUT, 0};
      poll(&pf, 1, 1000);
      continue;
    }
    if (w <= 0) return;  // the reader went away: nothing left to tell it
    p += w;
    n -= (size_t)w;
  }
}

void put(Buf& b, const void* src, size_t n);

void jsonStr(Buf& b, const char* s, size_t n) {
  static const char hex[] = "0123456789abcdef";
  put(b, "\"", 1);
  size_t run = 0;  // bytes copied as they are (UTF-8 included: the agent decodes it)
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != '"' && c != '\\') continue;
    put(b, s + run, i - run);
    run = i + 1;
    char e[6] = {'\\', (char)c, 0, 0, 0, 0};
    if (c < 0x20) e[1] = 'u', e[2] = '0', e[3] = '0', e[4] = hex[c >> 4], e[5] = hex[c & 15];
    put(b, e, c < 0x20 ? 6 : 2);
  }
  put(b, s + run, n - run);
  put(b, "\"", 1);
}

// CNI wants errors as JSON on stdout with a non-zero exit status.
[[noreturn]] void fail(int code, const char* fmt, ...) {
  char msg[1536];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  Buf b;
  char head[96];
  snprintf(head, sizeof head, "{\"cniVersion\":\"%s\",\"code\":%d,\"msg\":", gCniVersion, code);
  put(b, head, strlen(head));
  jsonStr(b, msg, strlen(msg));
  put(b, "}\n", 2);
  writeAll(1, b.p, b.n);
  _exit(1);
}

void put(Buf& b, const void* src, size_t n) {
  if (b.n + n + 1 > b.cap) {
    size_t cap = b.cap ? b.cap : 4096;
    while (cap < b.n + n + 1) cap *= 2;
    char* p = (char*)realloc(b.p, cap);
    if (!p) {
      static const char oom[] = "{\"code\":5,\"msg\":\"netplugin shim: out of memory\"}\n";
      writeAll(1, oom, sizeof oom - 1);
      _exit(1);
    }
    b.p = p;
    b.cap = cap;
  }
  memcpy(b.p + b.n, src, n);
  b.n += n;
  b.p[b.n] = 0;
}

int64_t nowMs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int remainingMs() {
  int64_t r = gDeadline - nowMs();
  return r <= 0 ? 0 : (r > INT_MAX ? INT_MAX : (int)r);
}

[[noreturn]] void deadlinePassed() {
  fail(11, "netplugin agent did not answer within %ld ms", gTimeoutMs);
}

// Waits for fd readiness until the deadline; false when it passed.
bool waitFd(int fd, short events) {
  for (;;) {
    struct pollfd p = {fd, events, 0};
    int ms = remainingMs();
    if (ms == 0) return false;
    int r = poll(&p, 1, ms);
    if (r > 0) return true;
    if (r < 0 && errno != EINTR) return true;  // let the read/write report the error
  }
}

// Reads exactly n bytes. Returns n, 0 on EOF (or a short frame), -1 on error
// with errno set; the deadline is handled here.
ssize_t readFull(int fd, char* p, size_t n) {
  size_t got = 0;
  while (got < n) {
    if (!waitFd(fd, POLLIN)) deadlinePassed();
    ssize_t r = read(fd, p + got, n - got);
    if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (r < 0) return -1;
    if (r == 0) return 0;
    got += (size_t)r;
  }
  return (ssize_t)got;
}

void readStdin(Buf& in) {
  char chunk[16384];
  for (;;) {
    ssize_t r = read(0, chunk, sizeof chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;  // EOF, or no stdin at all (EBADF): an empty request body
    put(in, chunk, (size_t)r);
  }
}

// Only for the cniVersion of our own error JSON; the agent parses the netconf.
void sniffCniVersion(const Buf& in) {
  if (!in.p) return;
  const char* k = strstr(in.p, "\"cniVersion\"");
  if (!k) return;
  k += 12;
  while (*k == ' ' || *k == '\t' || *k == '\n' || *k == '\r' || *k == ':') k++;
  if (*k++ != '"') return;
  size_t i = 0;
  while (i + 1 < sizeof gCniVersion && ((k[i] >= '0' && k[i] <= '9') || k[i] == '.')) i++;
  if (k[i] != '"' || i == 0) return;
  memcpy(gCniVersion, k, i);
  gCniVersion[i] = 0;
}

Buf buildRequest(const Buf& in) {
  Buf body;
  put(body, "{\"plugin\":", 10);
  jsonStr(body, gPlugin, strlen(gPlugin));
  put(body, ",\"env\":{", 8);
  bool first = true;
  for (char **e = environ; *e; e++) {
    const char* eq = strchr(*e, '=');
    if (!eq) continue;
    if (!first) put(body, ",", 1);
    first = false;
    jsonStr(body, *e, (size_t)(eq - *e));
    put(body, ":", 1);
    jsonStr(body, eq + 1, strlen(eq + 1));
  }
  put(body, "},\"stdin\":", 10);
  jsonStr(body, in.p ? in.p : "", in.n);
  put(body, "}", 1);

  Buf frame;
  unsigned char len[4] = {(unsigned char)(body.n >> 24), (unsigned char)(body.n >> 16),
                          (unsigned char)(body.n >> 8), (unsigned char)body.n};
  put(frame, kMagic, 4);
  put(frame, len, 4);
  put(frame, body.p, body.n);
  free(body.p);
  return frame;
}

// ---- the agent's answer: a binary frame (docs/agent.md, "Wire protocol") ----
//   0  'N' 'P' 'R' <version>
//   4  u8 exit status
//   5  u32be stdout length S
//   9  u32be stderr length E
//  13  S bytes of stdout, then E bytes of stderr
// The shim checks the header, reads the two lengths and copies the bytes: it
// decodes nothing, so what the plugin printed reaches the runtime byte for byte.

uint32_t be32(const unsigned char* p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

[[noreturn]] void agentStopped() {
  fail(11, "netplugin agent stopped while handling the request; the runtime should retry");
}

// Reads the answer after "accepted" and relays it; never returns.
[[noreturn]] void relayResponse(int fd, const char* sock) {
  unsigned char h[kResponseHeader];
  if (readFull(fd, (char*)h, sizeof h) != (ssize_t)sizeof h) agentStopped();
  if (memcmp(h, kResponseMagic, 3) != 0)
    fail(5, "the answer on %s does not start with the netplugin response magic \"NPR\" (it starts %02x %02x %02x %02x): "
            "the agent there is not from this shim's release; install the shim and netplugin-node from one release",
         sock, h[0], h[1], h[2], h[3]);
  if (h[3] != kVersion)
    fail(11, "netplugin agent speaks another protocol version (%u, this shim speaks %u); try again, and if this repeats "
             "install the shim and netplugin-node from one release",
         h[3], kVersion);
  uint32_t outN = be32(h + 5), errN = be32(h + 9);
  uint64_t total = (uint64_t)outN + errN;
  if (total > kMaxAnswer)
    fail(5, "netplugin agent announced a %llu-byte answer (stdout %u, stderr %u bytes), over the shim's limit of %llu bytes; "
            "the agent's answer is corrupt: check the netplugin-node log",
         (unsigned long long)total, outN, errN, (unsigned long long)kMaxAnswer);
  char* body = (char*)malloc(total ? (size_t)total : 1);
  if (!body) fail(5, "netplugin shim: out of memory for a %llu-byte answer", (unsigned long long)total);
  if (readFull(fd, body, (size_t)total) != (ssize_t)total) agentStopped();
  close(fd);
  if (errN) writeAll(2, body + outN, errN);
  if (outN) writeAll(1, body, outN);
  _exit(h[4]);
}

// ---- per-exec fallback ----

void copyStr(char* dst, size_t cap, const char* src) {
  size_t n = strnlen(src, cap - 1);
  memcpy(dst, src, n);
  dst[n] = 0;
}

void trim(char* s) {
  size_t n = strlen(s);
  while (n > 0 && (s[n - 1] == '\n' || s[n - 1] == '\r' || s[n - 1] == ' ' || s[n - 1] == '\t')) s[--n] = 0;
}

// Up to this many bytes of the fallback's stderr are kept to explain a crash.
const size_t kStderrKeep = 4096;

// "Error: ...", "TypeError [ERR_X]: ...": a name ending in Error at the line's start.
bool isErrorLine(const char* s, size_t n) {
  size_t i = 0;
  while (i < n && ((s[i] >= 'A' && s[i] <= 'Z') || (s[i] >= 'a' && s[i] <= 'z'))) i++;
  return i >= 5 && memcmp(s + i - 5, "Error", 5) == 0 && i < n && (s[i] == ':' || s[i] == ' ');
}

// The line of a Node crash report that says what went wrong ("Error: Cannot find
// module ...", "TypeError: ..."), else the first non-empty line; copied into out.
void crashLine(const Buf& err, char* out, size_t cap) {
  out[0] = 0;
  if (!err.p) return;
  const char* first = nullptr, *pick = nullptr;
  size_t firstN = 0, pickN = 0;
  for (const char* s = err.p; *s;) {
    const char* e = strchr(s, '\n');
    size_t n = e ? (size_t)(e - s) : strlen(s);
    while (n > 0 && (*s == ' ' || *s == '\t')) s++, n--;
    if (n > 0 && !first) first = s, firstN = n;
    if (n > 0 && !pick && isErrorLine(s, n)) pick = s, pickN = n;
    if (!e) break;
    s = e + 1;
  }
  if (!pick) pick = first, pickN = firstN;
  if (!pick) return;
  copyStr(out, pickN + 1 < cap ? pickN + 1 : cap, pick);
}

// Runs the per-exec entry (node <dir>/dist/<name>.cjs) as a child and relays its
// answer. Whatever happens the runtime gets a CNI answer on stdout: a fallback
// that cannot start or that dies without printing one (a host node without the
// package, an out-of-memory kill, a crash) becomes code 11, because the agent
// coming back makes a retry work.
[[noreturn]] void runFallback(const Buf& in, const char* why) {
  static char node[PATH_MAX], dir[PATH_MAX], conf[PATH_MAX + 32], script[PATH_MAX + 256];
  const char* envNode = getenv("NETPLUGIN_FALLBACK_NODE");
  const char* envDir = getenv("NETPLUGIN_FALLBACK_DIR");
  conf[0] = 0;
  ssize_t l = readlink("/proc/self/exe", conf, PATH_MAX);
  if (l > 0) {
    conf[l] = 0;
    char* slash = strrchr(conf, '/');
    if (slash) strcpy(slash + 1, "netplugin.fallback");
  }
  if (!envNode || !envDir) {
    int fd = conf[0] ? open(conf, O_RDONLY | O_CLOEXEC) : -1;
    if (fd < 0)
      fail(11, "netplugin agent is not running (%s) and this node has no per-exec fallback (%s: %s); "
               "try again once netplugin-node is up, or run install-cni on this node",
           why, conf[0] ? conf : "/proc/self/exe unreadable", strerror(errno));
    char text[2 * PATH_MAX + 4];
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    text[n > 0 ? n : 0] = 0;
    char* nl = strchr(text, '\n');
    if (nl) *nl = 0;
    copyStr(node, sizeof node, text);
    copyStr(dir, sizeof dir, nl ? nl + 1 : "");
    if (char* nl2 = strchr(dir, '\n')) *nl2 = 0;
    trim(node);
    trim(dir);
  }
  if (envNode) copyStr(node, sizeof node, envNode);
  if (envDir) copyStr(dir, sizeof dir, envDir);
  // install-cni leaves line 1 empty on a host without Node (a Kubernetes node
  // that only runs the agent in its pod): nothing to run until the agent is back.
  if (!node[0] || !dir[0])
    fail(11, "netplugin agent is not running (%s) and %s names no %s for the per-exec fallback; "
             "try again once netplugin-node is up",
         why, conf, !node[0] ? "node executable (line 1)" : "package directory (line 2)");
  // dist/<name>.cjs runs the bundle with its V8 code cache and skips Node's ES
  // module loader; a package built before it existed has only dist/<name>.mjs.
  snprintf(script, sizeof script, "%s/dist/%s.cjs", dir, gPlugin);
  if (access(script, R_OK) != 0) snprintf(script, sizeof script, "%s/dist/%s.mjs", dir, gPlugin);
  if (access(script, R_OK) != 0)
    fail(11, "netplugin agent is not running (%s) and the per-exec fallback %s is missing (%s); "
             "try again once netplugin-node is up, or run install-cni on this node",
         why, script, strerror(errno));

  // The runtime's stdin is consumed; hand node the same bytes in a memfd
  // (a pipe only on kernels without memfd, bounded by the pipe's capacity).
  int inFd = memfd_create("netplugin-stdin", MFD_CLOEXEC);
  if (inFd >= 0) {
    writeAll(inFd, in.p ? in.p : "", in.n);
    lseek(inFd, 0, SEEK_SET);
  } else {
    int pp[2];
    if (pipe2(pp, O_CLOEXEC) < 0) fail(11, "netplugin shim: pipe: %s", strerror(errno));
    if (in.n > 65536 && fcntl(pp[1], F_SETPIPE_SZ, (int)in.n) < (int)in.n)
      fail(5, "netplugin shim: %zu bytes of stdin do not fit a pipe and memfd is unavailable", in.n);
    writeAll(pp[1], in.p ? in.p : "", in.n);
    close(pp[1]);
    inFd = pp[0];
  }
  // out/err: the child's stdout and stderr; ex: its exec errno (closed by a
  // successful exec through O_CLOEXEC, so a read of 0 bytes means it runs).
  int out[2], err[2], ex[2];
  if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0 || pipe2(ex, O_CLOEXEC) < 0)
    fail(11, "netplugin shim: pipe: %s", strerror(errno));
  // NODE_EXTRA_CA_CERTS makes every Node start read and parse the bundle (~34 ms).
  unsetenv("NODE_EXTRA_CA_CERTS");
  pid_t pid = fork();
  if (pid < 0) fail(11, "netplugin shim: fork: %s", strerror(errno));
  if (pid == 0) {
    // dup2 clears FD_CLOEXEC on the copies.
    if (dup2(inFd, 0) < 0 || dup2(out[1], 1) < 0 || dup2(err[1], 2) < 0) _exit(127);
    signal(SIGPIPE, SIG_DFL);  // ignored dispositions survive exec
    char* argv[] = {node, script, nullptr};
    execve(node, argv, environ);
    int e = errno;
    (void)!write(ex[1], &e, sizeof e);
    _exit(127);
  }
  close(inFd);
  close(out[1]);
  close(err[1]);
  close(ex[1]);
  int execErrno = 0;
  ssize_t er;
  do er = read(ex[0], &execErrno, sizeof execErrno);
  while (er < 0 && errno == EINTR);
  close(ex[0]);
  if (er == (ssize_t)sizeof execErrno) {
    while (waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {}
    fail(11, "netplugin agent is not running (%s) and the per-exec fallback '%s %s' cannot run: %s; "
             "try again once netplugin-node is up, or run install-cni on this node",
         why, node, script, strerror(execErrno));
  }

  // Relay: stdout is held until the child exits (it must be judged whole);
  // stderr passes through as it comes, its head kept for a crash message.
  Buf answer, errhead;
  struct pollfd pf[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int openFds = 2;
  char chunk[16384];
  while (openFds > 0) {
    if (poll(pf, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (pf[i].fd < 0 || !pf[i].revents) continue;
      ssize_t r = read(pf[i].fd, chunk, sizeof chunk);
      if (r < 0 && (errno == EINTR || errno == EAGAIN)) continue;
      if (r <= 0) {
        close(pf[i].fd);
        pf[i].fd = -1;
        openFds--;
        continue;
      }
      if (i == 0) {
        put(answer, chunk, (size_t)r);
      } else {
        writeAll(2, chunk, (size_t)r);
        if (errhead.n < kStderrKeep) put(errhead, chunk, (size_t)r < kStderrKeep - errhead.n ? (size_t)r : kStderrKeep - errhead.n);
      }
    }
  }
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) {
      status = 0x7f00;  // unknown: treated as a failure without an answer
      break;
    }
  }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  const char* p = answer.p;
  while (p && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
  bool json = p && *p == '{';
  const char* cmd = getenv("CNI_COMMAND");
  // ADD and VERSION always print a result; DEL, CHECK, STATUS and GC print
  // nothing on success.
  bool needsAnswer = cmd && (strcmp(cmd, "ADD") == 0 || strcmp(cmd, "VERSION") == 0);
  bool exitedOk = WIFEXITED(status) && code == 0;
  if ((exitedOk && (json || (!needsAnswer && answer.n == 0))) || (!exitedOk && json)) {
    writeAll(1, answer.p ? answer.p : "", answer.n);
    _exit(code);
  }
  char how[64], line[512];
  if (WIFSIGNALED(status)) snprintf(how, sizeof how, "was killed by signal %d", WTERMSIG(status));
  else snprintf(how, sizeof how, "exited with status %d", code);
  crashLine(errhead, line, sizeof line);
  fail(11, "netplugin agent is not running (%s) and the per-exec fallback '%s %s' %s without a CNI answer%s%s; "
           "try again once netplugin-node is up",
       why, node, script, how, line[0] ? ": " : "", line);
}

// Connects to the agent. Returns the fd, or -1 with errno when the agent is
// not there (the request never reached it, so the fallback may run it).
int connectAgent(const char* path) {
  struct sockaddr_un sa;
  memset(&sa, 0, sizeof sa);
  sa.sun_family = AF_UNIX;
  if (strlen(path) >= sizeof sa.sun_path) {
    errno = ENAMETOOLONG;
    return -1;
  }
  strcpy(sa.sun_path, path);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  // A blocking unix connect waits while the listener's backlog is full;
  // SO_SNDTIMEO bounds that wait (it fails with EAGAIN) by our deadline.
  int ms = remainingMs();
  if (ms == 0) deadlinePassed();  // a zero SO_SNDTIMEO would mean "wait forever"
  struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  for (;;) {
    if (connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0 || errno == EISCONN) break;
    if (errno == EINTR) continue;
    int e = errno;
    close(fd);
    if (e == EAGAIN || e == EINPROGRESS || e == ETIMEDOUT) deadlinePassed();
    errno = e;
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char **argv) {
  signal(SIGPIPE, SIG_IGN);
  if (argv[0] && argv[0][0]) {
    const char* slash = strrchr(argv[0], '/');
    gPlugin = slash ? slash + 1 : argv[0];
  }
  // Runtimes pass no arguments; --version is for people checking an install.
  if (argc > 1 && strcmp(argv[1], "--version") == 0) {
    char line[256];
    int n = snprintf(line, sizeof line, "%s %s (native shim)\n", gPlugin, NETPLUGIN_VERSION);
    writeAll(1, line, n > 0 && (size_t)n < sizeof line ? (size_t)n : 0);
    return 0;
  }
  if (const char* t = getenv("NETPLUGIN_SHIM_TIMEOUT_MS")) {
    char* end;
    long v = strtol(t, &end, 10);
    if (*t == 0 || *end != 0 || v <= 0)
      fail(4, "NETPLUGIN_SHIM_TIMEOUT_MS='%s' is not a positive number of milliseconds; unset it to use "
              "the default %ld", t, kDefaultTimeoutMs);
    gTimeoutMs = v;
  }
  gDeadline = nowMs() + gTimeoutMs;
  const char* sock = getenv("NETPLUGIN_AGENT_SOCKET");
  if (!sock || !*sock) sock = kDefaultSocket;

  Buf in;
  readStdin(in);
  sniffCniVersion(in);

  char why[PATH_MAX + 64];
  int fd = connectAgent(sock);
  if (fd < 0) {
    snprintf(why, sizeof why, "%s: %s", sock, strerror(errno));
    runFallback(in, why);
  }
  Buf req = buildRequest(in);
  for (size_t off = 0; off < req.n;) {
    if (!waitFd(fd, POLLOUT)) deadlinePassed();
    ssize_t w = send(fd, req.p + off, req.n - off, MSG_NOSIGNAL);
    if (w < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (w <= 0) {
      // The agent only accepts a complete request, so it has not run this one.
      snprintf(why, sizeof why, "%s closed the connection: %s", sock, strerror(errno));
      close(fd);
      runFallback(in, why);
    }
    off += (size_t)w;
  }
  free(req.p);

  char mark = 0;
  ssize_t r = readFull(fd, &mark, 1);
  if (r != 1 || (unsigned char)mark != kAccepted) {
    // Closed (or refused: old protocol version, wrong peer) before accepting.
    snprintf(why, sizeof why, "%s closed the connection before accepting the request%s%s", sock,
             r < 0 ? ": " : "", r < 0 ? strerror(errno) : "");
    close(fd);
    runFallback(in, why);
  }

  // Accepted: from here on the request is the agent's, and never re-run.
  relayResponse(fd, sock);
}
