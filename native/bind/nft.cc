// nftables through libnftables, loaded with dlopen on first use: the addon
// still loads (and every rtnetlink function works) on a node without the
// library; only the features that need nftables fail, with a message naming
// the package. A script runs as one nftables transaction (the library sends
// the whole buffer as one netlink batch), so a ruleset change is atomic: the
// kernel applies all of it or none.
//
// A context is created per call, inside the target namespace: libnftables opens
// its netlink socket in the namespace current at that moment, and a fresh
// context has no cache that could describe another namespace or a stale
// ruleset. nftRunAsync runs the same work on a libuv threadpool thread (the
// thread enters and leaves the namespace itself; the fd is dup'ed so closing
// the NetNS object meanwhile is harmless).
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

#include "bind/common.h"
#include "core/netns.h"
#include "bind/ops.h"

namespace np {

namespace {

struct nft_ctx;
struct NftLib {
  bool loaded = false;
  std::string error;
  nft_ctx* (*ctxNew)(uint32_t) = nullptr;
  void (*ctxFree)(nft_ctx*) = nullptr;
  int (*bufferOutput)(nft_ctx*) = nullptr;
  int (*bufferError)(nft_ctx*) = nullptr;
  const char* (*outputBuffer)(nft_ctx*) = nullptr;
  const char* (*errorBuffer)(nft_ctx*) = nullptr;
  unsigned int (*getFlags)(nft_ctx*) = nullptr;
  void (*setFlags)(nft_ctx*, unsigned int) = nullptr;
  int (*runBuffer)(nft_ctx*, const char*) = nullptr;
};

// Output flags from libnftables.h (stable ABI since nftables 0.9).
constexpr unsigned int kOutputHandle = 1u << 3;
constexpr unsigned int kOutputJson = 1u << 4;
constexpr unsigned int kOutputEcho = 1u << 5;

NftLib& lib() {
  static NftLib l;
  static std::once_flag once;
  std::call_once(once, [] {
    void* h = ::dlopen("libnftables.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      const char* e = ::dlerror();
      l.error = e ? e : "dlopen(libnftables.so.1) failed";
      return;
    }
    bool ok = true;
    auto sym = [&](const char* name) {
      void* p = ::dlsym(h, name);
      if (!p && ok) {
        ok = false;
        l.error = std::string("libnftables.so.1 has no symbol ") + name;
      }
      return p;
    };
    l.ctxNew = reinterpret_cast<nft_ctx* (*)(uint32_t)>(sym("nft_ctx_new"));
    l.ctxFree = reinterpret_cast<void (*)(nft_ctx*)>(sym("nft_ctx_free"));
    l.bufferOutput = reinterpret_cast<int (*)(nft_ctx*)>(sym("nft_ctx_buffer_output"));
    l.bufferError = reinterpret_cast<int (*)(nft_ctx*)>(sym("nft_ctx_buffer_error"));
    l.outputBuffer = reinterpret_cast<const char* (*)(nft_ctx*)>(sym("nft_ctx_get_output_buffer"));
    l.errorBuffer = reinterpret_cast<const char* (*)(nft_ctx*)>(sym("nft_ctx_get_error_buffer"));
    l.getFlags = reinterpret_cast<unsigned int (*)(nft_ctx*)>(sym("nft_ctx_output_get_flags"));
    l.setFlags = reinterpret_cast<void (*)(nft_ctx*, unsigned int)>(sym("nft_ctx_output_set_flags"));
    l.runBuffer = reinterpret_cast<int (*)(nft_ctx*, const char*)>(sym("nft_run_cmd_from_buffer"));
    l.loaded = ok;
  });
  return l;
}

struct NftOpts {
  bool json = false;
  bool echo = false;
  bool handles = false;
  int nsFd = -1;  // owned (dup'ed) when >= 0
};

struct NftResult {
  bool ok = false;
  bool missing = false;  // the library could not be loaded
  int rc = 0;
  std::string output;
  std::string error;
};

void runNft(const std::string& script, const NftOpts& o, NftResult& r) {
  NftLib& l = lib();
  if (!l.loaded) {
    r.missing = true;
    r.error = l.error;
    return;
  }
  NlError e;
  NsSwitch sw(o.nsFd, e);
  if (!sw.ok()) {
    r.rc = -1;
    r.error = std::string("setns into the target network namespace failed: ") + std::strerror(e.err);
    return;
  }
  nft_ctx* ctx = l.ctxNew(0);
  if (!ctx) {
    r.rc = -1;
    r.error = "nft_ctx_new failed (out of memory?)";
    return;
  }
  l.bufferOutput(ctx);
  l.bufferError(ctx);
  unsigned int flags = l.getFlags(ctx);
  if (o.json) flags |= kOutputJson;
  if (o.echo) flags |= kOutputEcho;
  if (o.handles) flags |= kOutputHandle;
  l.setFlags(ctx, flags);
  r.rc = l.runBuffer(ctx, script.c_str());
  const char* out = l.outputBuffer(ctx);
  const char* err = l.errorBuffer(ctx);
  r.output = out ? out : "";
  r.error = err ? err : "";
  r.ok = r.rc == 0;
  l.ctxFree(ctx);
}

Napi::Object resultObject(Napi::Env env, const NftResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", Napi::Boolean::New(env, r.ok));
  o.Set("missing", Napi::Boolean::New(env, r.missing));
  o.Set("rc", Napi::Number::New(env, r.rc));
  o.Set("output", Napi::String::New(env, r.output));
  o.Set("error", Napi::String::New(env, r.error));
  return o;
}

// (script, { json?, echo?, handles?, netns?: NetNS }) -> NftOpts with a dup'ed netns fd.
bool parseArgs(const Napi::CallbackInfo& info, const char* fn, NetnsFdOf fdOf, std::string& script, NftOpts& o) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  if (!a.string(info[0], "script", script)) return false;
  if (script.find('\0') != std::string::npos) return a.failText("script", "a string without NUL bytes", "a string with a NUL byte");
  if (info.Length() > 1 && !info[1].IsUndefined()) {
    Napi::Object opts;
    if (!a.object(info[1], "options", opts)) return false;
    Napi::Value v;
    if (Args::present(v = a.prop(opts, "json")) && !a.boolean(v, "options.json", o.json)) return false;
    if (Args::present(v = a.prop(opts, "echo")) && !a.boolean(v, "options.echo", o.echo)) return false;
    if (Args::present(v = a.prop(opts, "handles")) && !a.boolean(v, "options.handles", o.handles)) return false;
    if (Args::present(v = a.prop(opts, "netns"))) {
      int fd = fdOf(env, v);
      if (env.IsExceptionPending()) return false;
      o.nsFd = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
      if (o.nsFd < 0) {
        NlError e;
        e.set(errno, "nft", "dup(netns fd)");
        throwNlError(env, e);
        return false;
      }
    }
  }
  return a.ok();
}

class NftWorker : public Napi::AsyncWorker {
 public:
  NftWorker(Napi::Env env, std::string script, NftOpts o)
      : Napi::AsyncWorker(env, "netplugin:nft"), deferred_(Napi::Promise::Deferred::New(env)), script_(std::move(script)), o_(o) {}
  ~NftWorker() override {
    if (o_.nsFd >= 0) ::close(o_.nsFd);
  }
  Napi::Promise promise() { return deferred_.Promise(); }

 protected:
  void Execute() override { runNft(script_, o_, r_); }
  void OnOK() override { deferred_.Resolve(resultObject(Env(), r_)); }

 private:
  Napi::Promise::Deferred deferred_;
  std::string script_;
  NftOpts o_;
  NftResult r_;
};

}  // namespace

Napi::Value NftRun(const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  std::string script;
  NftOpts o;
  if (!parseArgs(info, "nftRun", fdOf, script, o)) {
    if (o.nsFd >= 0) ::close(o.nsFd);
    return env.Undefined();
  }
  NftResult r;
  runNft(script, o, r);
  if (o.nsFd >= 0) ::close(o.nsFd);
  return resultObject(env, r);
}

Napi::Value NftRunAsync(const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  std::string script;
  NftOpts o;
  if (!parseArgs(info, "nftRunAsync", fdOf, script, o)) {
    if (o.nsFd >= 0) ::close(o.nsFd);
    Napi::Value err = env.GetAndClearPendingException().Value();
    Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
    d.Reject(err);
    return d.Promise();
  }
  auto* w = new NftWorker(env, std::move(script), o);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

}  // namespace np
