// SO_PEERCRED of a connected unix socket (the node agent checks who is
// calling its CNI socket; Node has no API for it).
#include <errno.h>
#include <sys/socket.h>

#include "bind/args.h"
#include "bind/ops.h"

namespace np {

Napi::Value PeerCred(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Args a(env, "peerCred");
  uint32_t fd;
  if (!a.uint(info[0], "fd", 0, 0x7fffffff, fd)) return env.Undefined();
  ucred c{};
  socklen_t len = sizeof c;
  if (::getsockopt(static_cast<int>(fd), SOL_SOCKET, SO_PEERCRED, &c, &len) != 0) {
    NlError e;
    e.set(errno, "SO_PEERCRED", "fd " + std::to_string(fd));
    throwNlError(env, e);
    return env.Undefined();
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("pid", static_cast<double>(c.pid));
  o.Set("uid", static_cast<double>(c.uid));
  o.Set("gid", static_cast<double>(c.gid));
  return o;
}

}  // namespace np
