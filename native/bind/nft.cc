// nftables: the JS face of core/nft (nftRun, and nftRunAsync on the libuv
// threadpool; the netns fd is dup'ed so closing the NetNS object meanwhile is
// harmless).
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <string>

#include "bind/common.h"
#include "core/nft.h"
#include "bind/ops.h"

namespace np {

namespace {

bool readNftArgsOrKeepFd(const Napi::CallbackInfo& info, const char* fn, NetnsFdOf fdOf, std::string& script,
                         NftOpts& o);

Napi::Object resultObject(Napi::Env env, const NftResult& r) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("ok", Napi::Boolean::New(env, r.ok));
  o.Set("missing", Napi::Boolean::New(env, r.missing));
  o.Set("rc", Napi::Number::New(env, r.rc));
  o.Set("output", Napi::String::New(env, r.output));
  o.Set("error", Napi::String::New(env, r.error));
  return o;
}

// (script, { json?, echo?, handles?, netns?: NetNS }) -> NftOpts with a dup'ed
// netns fd; on failure (an exception pending) no fd is left open.
bool readNftArgs(const Napi::CallbackInfo& info, const char* fn, NetnsFdOf fdOf, std::string& script, NftOpts& o) {
  if (readNftArgsOrKeepFd(info, fn, fdOf, script, o)) return true;
  if (o.nsFd >= 0) ::close(o.nsFd);
  o.nsFd = -1;
  return false;
}

bool readNftArgsOrKeepFd(const Napi::CallbackInfo& info, const char* fn, NetnsFdOf fdOf, std::string& script,
                         NftOpts& o) {
  Napi::Env env = info.Env();
  Args a(env, fn);
  if (!a.string(info[0], "script", script)) return false;
  if (script.find('\0') != std::string::npos)
    return a.failText("script", "a string without NUL bytes", "a string with a NUL byte");
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
      : Napi::AsyncWorker(env, "netplugin:nft"),
        deferred_(Napi::Promise::Deferred::New(env)),
        script_(std::move(script)),
        o_(o) {}
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
  if (!readNftArgs(info, "nftRun", fdOf, script, o)) return env.Undefined();
  NftResult r;
  runNft(script, o, r);
  if (o.nsFd >= 0) ::close(o.nsFd);
  return resultObject(env, r);
}

Napi::Value NftRunAsync(const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  std::string script;
  NftOpts o;
  if (!readNftArgs(info, "nftRunAsync", fdOf, script, o)) return rejectedWithPending(env);
  auto* w = new NftWorker(env, std::move(script), o);
  Napi::Promise p = w->promise();
  w->Queue();
  return p;
}

}  // namespace np
