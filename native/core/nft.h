// nftables scripts through libnftables (dlopen'ed on first use), without N-API.
#pragma once

#include <string>

namespace np {

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

// Runs script as one transaction inside o.nsFd's namespace (o.nsFd < 0: the
// calling thread's). Any thread: it enters and leaves the namespace itself.
void runNft(const std::string& script, const NftOpts& o, NftResult& r);

}  // namespace np
