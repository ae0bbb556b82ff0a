#include <errno.h>

#include <cstring>

#include "bind/common.h"

namespace np {

std::string errnoName(int err) {
  switch (err) {
#define E(x) \
  case x:    \
    return #x;
    E(EPERM) E(ENOENT) E(ESRCH) E(EINTR) E(EIO) E(ENXIO) E(E2BIG) E(ENOEXEC) E(EBADF) E(ECHILD) E(EAGAIN)
    E(ENOMEM) E(EACCES) E(EFAULT) E(EBUSY) E(EEXIST) E(EXDEV) E(ENODEV) E(ENOTDIR) E(EISDIR) E(EINVAL)
    E(ENFILE) E(EMFILE) E(ENOTTY) E(EFBIG) E(ENOSPC) E(ESPIPE) E(EROFS) E(EMLINK) E(EPIPE) E(EDOM) E(ERANGE)
    E(EDEADLK) E(ENAMETOOLONG) E(ENOLCK) E(ENOSYS) E(ENOTEMPTY) E(ELOOP) E(ENOMSG) E(EIDRM) E(ENODATA)
    E(ETIME) E(ENOLINK) E(EPROTO) E(EBADMSG) E(EOVERFLOW) E(EILSEQ) E(ENOTSOCK) E(EDESTADDRREQ) E(EMSGSIZE)
    E(EPROTOTYPE) E(ENOPROTOOPT) E(EPROTONOSUPPORT) E(ESOCKTNOSUPPORT) E(EOPNOTSUPP) E(EPFNOSUPPORT)
    E(EAFNOSUPPORT) E(EADDRINUSE) E(EADDRNOTAVAIL) E(ENETDOWN) E(ENETUNREACH) E(ENETRESET) E(ECONNABORTED)
    E(ECONNRESET) E(ENOBUFS) E(EISCONN) E(ENOTCONN) E(ETIMEDOUT) E(ECONNREFUSED) E(EHOSTDOWN)
    E(EHOSTUNREACH) E(EALREADY) E(EINPROGRESS) E(ESTALE) E(EDQUOT) E(ECANCELED) E(EOWNERDEAD)
    E(ENOTRECOVERABLE) E(ERFKILL) E(EHWPOISON)
#undef E
    default:
      return "E" + std::to_string(err);
  }
}

void throwTypeError(Napi::Env env, const std::string& msg) {
  if (env.IsExceptionPending()) return;
  Napi::TypeError::New(env, msg).ThrowAsJavaScriptException();
}

Napi::Value makeNlError(Napi::Env env, const NlError& e) {
  if (env.IsExceptionPending()) return Napi::Value();
  Napi::Object init = Napi::Object::New(env);
  std::string code = errnoName(e.err);
  std::string detail = std::strerror(e.err);
  init.Set("code", code);
  init.Set("errno", e.err);
  init.Set("op", e.op);
  init.Set("subject", e.subject);
  init.Set("detail", detail);
  if (!e.extack.empty()) init.Set("extack", e.extack);
  if (env.IsExceptionPending()) return Napi::Value();

  AddonData* d = addonData(env);
  if (d && !d->errorClass.IsEmpty()) {
    Napi::Object err = d->errorClass.New({init});
    if (env.IsExceptionPending()) return Napi::Value();  // the constructor itself threw
    return err;
  }
  // Without the TS class (addon used directly) the same fields go on an Error.
  std::string msg = e.op + (e.subject.empty() ? "" : " " + e.subject) + ": " + detail + " (" + code + ")" +
                    (e.extack.empty() ? "" : ": " + e.extack);
  Napi::Error err = Napi::Error::New(env, msg);
  Napi::Object o = err.Value();
  o.Set("code", code);
  o.Set("errno", e.err);
  o.Set("op", e.op);
  o.Set("subject", e.subject);
  if (!e.extack.empty()) o.Set("extack", e.extack);
  if (env.IsExceptionPending()) return Napi::Value();
  return o;
}

void throwNlError(Napi::Env env, const NlError& e) {
  Napi::Value err = makeNlError(env, e);
  if (err.IsEmpty() || env.IsExceptionPending()) return;
  Napi::Error(env, err).ThrowAsJavaScriptException();
}

Napi::Value rejectedWithPending(Napi::Env env) {
  // Cleared first: N-API refuses to create a promise while an exception is pending.
  Napi::Value err = env.GetAndClearPendingException().Value();
  Napi::Promise::Deferred d = Napi::Promise::Deferred::New(env);
  d.Reject(err);
  return d.Promise();
}

void rejectWithNlError(Napi::Env env, Napi::Promise::Deferred& d, const NlError& e) {
  Napi::Value v = makeNlError(env, e);
  if (env.IsExceptionPending()) v = env.GetAndClearPendingException().Value();
  d.Reject(v);
}

}  // namespace np
