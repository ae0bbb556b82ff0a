{
  "targets": [
    {
      "target_name": "netplugin_netlink",
      "sources": [
        "native/netlink.cc",
        "native/nl_socket.cc",
        "native/netns.cc",
        "native/errors.cc",
        "native/args.cc",
        "native/link.cc",
        "native/addr.cc",
        "native/route.cc",
        "native/neigh.cc",
        "native/tunnel.cc",
        "native/sysctl.cc",
        "native/peercred.cc",
        "native/flock.cc",
        "native/nft.cc",
        "native/conntrack.cc"
      ],
      "include_dirs": ["<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fexceptions", "-O3"],
      "cflags_cc!": ["-fexceptions", "-O3"],
      "cflags": ["-O2", "-fno-exceptions", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"],
      "cflags_cc": ["-std=c++17", "-O2", "-fno-exceptions", "-fno-rtti"],
      "libraries": ["-ldl"]
    }
  ]
}
