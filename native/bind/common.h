// Shared by the addon's source files: node-addon-api with C++ exceptions off
// (every failure is a pending JS exception the caller must check), and the
// per-environment instance data that makes the addon load in worker threads.
#pragma once

#ifndef NAPI_VERSION
#define NAPI_VERSION 8
#endif
#ifndef NAPI_DISABLE_CPP_EXCEPTIONS
#define NAPI_DISABLE_CPP_EXCEPTIONS
#endif
#include <napi.h>

#include <string>

#include "core/nl_socket.h"

namespace np {

// Bumped whenever the JS-visible surface changes, so src/native/index.ts can
// refuse a stale prebuild instead of failing later in odd ways.
constexpr int kAbiVersion = 9;

// One per Node environment (main thread, each worker).
struct AddonData {
  Napi::FunctionReference errorClass;  // NetlinkError, from setErrorClass()
  Napi::FunctionReference netnsCtor;
  Napi::FunctionReference netlinkCtor;
};

AddonData* addonData(Napi::Env env);

// Throws a NetlinkError (or a plain Error carrying the same fields before
// setErrorClass was called).
void throwNlError(Napi::Env env, const NlError& e);
// The same error as a value (for rejecting a promise); empty with an
// exception pending when building it failed.
Napi::Value makeNlError(Napi::Env env, const NlError& e);
// A promise already rejected with whatever exception is pending (argument
// TypeErrors): an async API reports bad input by rejecting, not throwing.
Napi::Value rejectedWithPending(Napi::Env env);
// Rejects d with the NetlinkError of e (or whatever building it threw).
void rejectWithNlError(Napi::Env env, Napi::Promise::Deferred& d, const NlError& e);
// Throws TypeError(msg).
void throwTypeError(Napi::Env env, const std::string& msg);
// 'EEXIST' for EEXIST, 'E<n>' for errnos without a name here.
std::string errnoName(int err);

}  // namespace np
