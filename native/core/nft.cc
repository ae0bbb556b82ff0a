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
#include "core/nft.h"

#include <dlfcn.h>

#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/netns.h"

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

}  // namespace

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

}  // namespace np
