{
  "targets": [
    {
      "target_name": "netplugin_netlink",
      "sources": [
        "native/core/ip.cc",
        "native/core/nl_socket.cc",
        "native/core/netns.cc",
        "native/core/link.cc",
        "native/core/addr.cc",
        "native/core/route.cc",
        "native/core/neigh.cc",
        "native/core/tunnel.cc",
        "native/core/sysctl.cc",
        "native/core/conntrack.cc",
        "native/core/flowlog.cc",
        "native/core/names.cc",
        "native/core/nft.cc",
        "native/bind/netlink.cc",
        "native/bind/errors.cc",
        "native/bind/args.cc",
        "native/bind/link.cc",
        "native/bind/addr.cc",
        "native/bind/route.cc",
        "native/bind/neigh.cc",
        "native/bind/tunnel.cc",
        "native/bind/sysctl.cc",
        "native/bind/conntrack.cc",
        "native/bind/flowlog.cc",
        "native/bind/peercred.cc",
        "native/bind/flock.cc",
        "native/bind/nft.cc"
      ],
      "include_dirs": ["native", "<!(node -p \"require('node-addon-api').include_dir\")"],
      "defines": ["NAPI_VERSION=8", "NAPI_DISABLE_CPP_EXCEPTIONS", "NODE_ADDON_API_DISABLE_DEPRECATED"],
      "cflags!": ["-fexceptions", "-O3"],
      "cflags_cc!": ["-fexceptions", "-O3"],
      "cflags": ["-O2", "-fno-exceptions", "-Wall", "-Wextra", "-Wno-unused-parameter", "-fvisibility=hidden"],
      "cflags_cc": ["-std=c++17", "-O2", "-fno-exceptions", "-fno-rtti"],
      "libraries": ["-ldl"]
    }
  ]
}
