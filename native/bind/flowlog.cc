// Flow-log event readers, the JS face of core/flowlog:
//   flowReader('nflog', {group, copyRange?, rcvbufBytes?, netns?}, onEvents) -> {close()}
//   flowReader('conntrack', {rcvbufBytes?, netns?}, onEvents) -> {close()}
// onEvents(events: object[], overruns: number) runs on the event loop each time the socket has
// something to read (at most kMaxDatagrams datagrams a turn, so a flood never starves the loop).
// The socket is polled with a uv_poll handle on the caller's loop: no thread, no threadpool slot.
// Plus Netlink.conntrackDump() (in the handle's namespace), the same objects as conntrack events.
#include <uv.h>

#include <sys/socket.h>

#include "bind/ops.h"
#include "core/flowlog.h"

namespace np {

namespace {

constexpr int kMaxDatagrams = 64;

Napi::Object ctEventToJs(Napi::Env env, const CtEvent& c) {
  Napi::Object o = Napi::Object::New(env);
  const char* type = c.type == CtEvent::kNew ? "new" : c.type == CtEvent::kDestroy ? "destroy" : "dump";
  o.Set("type", Napi::String::New(env, type));
  setCtFields(env, o, c);
  if (c.hasMark) o.Set("mark", Napi::Number::New(env, c.mark));
  if (c.hasCounters) {
    o.Set("packetsOrig", Napi::Number::New(env, static_cast<double>(c.origPackets)));
    o.Set("bytesOrig", Napi::Number::New(env, static_cast<double>(c.origBytes)));
    o.Set("packetsReply", Napi::Number::New(env, static_cast<double>(c.replyPackets)));
    o.Set("bytesReply", Napi::Number::New(env, static_cast<double>(c.replyBytes)));
  }
  if (c.tcpState) o.Set("tcpState", Napi::Number::New(env, c.tcpState - 1));
  return o;
}

Napi::Object nflogToJs(Napi::Env env, const NflogPacket& p) {
  Napi::Object o = Napi::Object::New(env);
  o.Set("prefix", Napi::String::New(env, p.prefix));
  o.Set("family", Napi::Number::New(env, p.family == AF_INET6 ? 6 : 4));
  o.Set("protocol", Napi::Number::New(env, p.tuple.proto));
  setCtTuple(env, o, p.tuple, false);
  o.Set("length", Napi::Number::New(env, p.length));
  o.Set("indev", Napi::Number::New(env, p.indev));
  o.Set("outdev", Napi::Number::New(env, p.outdev));
  return o;
}

// One open reader. Freed by the uv_close callback after close() (or the environment's teardown).
struct Reader {
  Napi::Env env;
  bool nflog;
  EventSocket sock;
  uv_poll_t poll{};
  Napi::FunctionReference cb;
  Napi::AsyncContext ctx;
  bool closed = false;
  Reader(Napi::Env e, bool n) : env(e), nflog(n), ctx(e, n ? "netplugin:nflog" : "netplugin:conntrack") {}
};

void closeReader(Reader* r);
void cleanupHook(void* p) { closeReader(static_cast<Reader*>(p)); }

void closeReader(Reader* r) {
  if (r->closed) return;
  r->closed = true;
  napi_remove_env_cleanup_hook(r->env, cleanupHook, r);
  uv_poll_stop(&r->poll);
  uv_close(reinterpret_cast<uv_handle_t*>(&r->poll), [](uv_handle_t* h) {
    Reader* rr = static_cast<Reader*>(h->data);
    rr->sock.close();
    delete rr;
  });
}

void onReadable(uv_poll_t* h, int status, int events) {
  Reader* r = static_cast<Reader*>(h->data);
  if (r->closed) return;
  Napi::Env env = r->env;
  Napi::HandleScope scope(env);
  Napi::Array out = Napi::Array::New(env);
  uint32_t n = 0, overruns = 0;
  NlError e;
  bool ok = r->sock.drain(
      [&](const nlmsghdr* m) {
        if (r->nflog) {
          NflogPacket p;
          if (parseNflogPacket(m, p)) out.Set(n++, nflogToJs(env, p));
        } else {
          CtEvent c;
          if (parseCtEvent(m, c)) out.Set(n++, ctEventToJs(env, c));
        }
      },
      kMaxDatagrams, overruns, e);
  if (n == 0 && overruns == 0 && ok) return;
  std::vector<napi_value> args = {out, Napi::Number::New(env, overruns)};
  if (!ok) args.push_back(makeNlError(env, e));
  r->cb.MakeCallback(env.Global(), args, r->ctx);
  if (env.IsExceptionPending()) {
    Napi::Error err = env.GetAndClearPendingException();
    napi_fatal_exception(env, err.Value());
  }
  if (!ok) closeReader(r);
}

Napi::Value closeFn(const Napi::CallbackInfo& info) {
  auto* r = static_cast<Reader*>(info.Data());
  if (r) closeReader(r);
  return info.Env().Undefined();
}

}  // namespace

Napi::Value FlowReader(const Napi::CallbackInfo& info, NetnsFdOf fdOf) {
  Napi::Env env = info.Env();
  Args a(env, "flowReader");
  std::string kind;
  Napi::Object opts;
  if (!a.string(info[0], "kind", kind)) return env.Undefined();
  if (kind != "nflog" && kind != "conntrack") {
    a.fail("kind", "'nflog' or 'conntrack'", info[0]);
    return env.Undefined();
  }
  if (!a.object(info[1], "options", opts)) return env.Undefined();
  if (!info[2].IsFunction()) {
    a.fail("onEvents", "a function (events, overruns, error?)", info[2]);
    return env.Undefined();
  }
  uint32_t group = 0, copyRange = 128, rcvbuf = 4 << 20;
  if (kind == "nflog" && !a.uint(a.prop(opts, "group"), "options.group", 0, 65535, group)) return env.Undefined();
  Napi::Value cr = a.prop(opts, "copyRange");
  if (Args::present(cr) && !a.uint(cr, "options.copyRange", 40, 65535, copyRange)) return env.Undefined();
  Napi::Value rb = a.prop(opts, "rcvbufBytes");
  if (Args::present(rb) && !a.uint(rb, "options.rcvbufBytes", 65536, 1u << 30, rcvbuf)) return env.Undefined();
  int nsFd = -1;
  Napi::Value ns = a.prop(opts, "netns");
  if (Args::present(ns)) {
    nsFd = fdOf(env, ns);
    if (env.IsExceptionPending()) return env.Undefined();
    if (nsFd < 0) {
      a.fail("options.netns", "an open NetNS from openNetns()", ns);
      return env.Undefined();
    }
  }
  if (!a.ok()) return env.Undefined();

  auto* r = new Reader(env, kind == "nflog");
  NlError e;
  bool opened = r->nflog ? r->sock.openNflog(nsFd, static_cast<uint16_t>(group), copyRange, static_cast<int>(rcvbuf), e)
                         : r->sock.openConntrack(nsFd, static_cast<int>(rcvbuf), e);
  if (!opened) {
    delete r;
    throwNlError(env, e);
    return env.Undefined();
  }
  uv_loop_t* loop = nullptr;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok || uv_poll_init(loop, &r->poll, r->sock.fd()) != 0) {
    delete r;
    e.set(EINVAL, "uv_poll_init", "flowReader");
    throwNlError(env, e);
    return env.Undefined();
  }
  r->poll.data = r;
  r->cb = Napi::Persistent(info[2].As<Napi::Function>());
  uv_poll_start(&r->poll, UV_READABLE, onReadable);
  napi_add_env_cleanup_hook(env, cleanupHook, r);
  Napi::Object handle = Napi::Object::New(env);
  handle.Set("close", Napi::Function::New(env, closeFn, "close", r));
  return handle;
}

// conntrackDump() -> every entry of the handle's namespace, as conntrack events of type 'dump'.
Napi::Value ConntrackDump(Handle& h, const Napi::CallbackInfo& info) {
  return listAllToJs(info.Env(), h, conntrackDump, ctEventToJs);
}

}  // namespace np
