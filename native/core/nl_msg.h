// Building and walking rtnetlink messages: a growable, 4-byte aligned buffer
// with nested attributes, and a bounds-checked attribute iterator.
#pragma once

#include <linux/netlink.h>
#include <linux/rtnetlink.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace np {

class NlMsg {
 public:
  NlMsg(uint16_t type, uint16_t flags) {
    buf_.reserve(512);
    buf_.resize(NLMSG_HDRLEN);
    auto* h = hdr();
    h->nlmsg_len = NLMSG_HDRLEN;
    h->nlmsg_type = type;
    h->nlmsg_flags = flags;
  }

  nlmsghdr* hdr() { return reinterpret_cast<nlmsghdr*>(buf_.data()); }
  uint8_t* data() { return buf_.data(); }
  size_t size() const { return buf_.size(); }
  uint16_t type() const { return reinterpret_cast<const nlmsghdr*>(buf_.data())->nlmsg_type; }

  // Appends a fixed header (ifinfomsg, rtmsg, ...) and returns its offset;
  // offsets, not pointers, because the buffer may move as it grows.
  template <typename T>
  size_t put(const T& v) {
    size_t off = buf_.size();
    append(&v, sizeof(T));
    return off;
  }
  template <typename T>
  T* at(size_t off) {
    return reinterpret_cast<T*>(buf_.data() + off);
  }

  void attr(uint16_t type, const void* data, size_t len) {
    rtattr a;
    a.rta_len = static_cast<unsigned short>(RTA_LENGTH(len));
    a.rta_type = type;
    size_t start = buf_.size();
    buf_.resize(start + RTA_ALIGN(a.rta_len), 0);
    std::memcpy(buf_.data() + start, &a, sizeof a);
    if (len) std::memcpy(buf_.data() + start + RTA_LENGTH(0), data, len);
    sync();
  }
  void u8(uint16_t type, uint8_t v) { attr(type, &v, 1); }
  void u32(uint16_t type, uint32_t v) { attr(type, &v, 4); }
  void s32(uint16_t type, int32_t v) { attr(type, &v, 4); }
  void str(uint16_t type, const std::string& s) { attr(type, s.c_str(), s.size() + 1); }

  // Bytes appended as they are (already-encoded attributes), padded to 4.
  void raw(const void* p, size_t len) { append(p, len); }

  size_t nestBegin(uint16_t type) {
    size_t off = buf_.size();
    attr(type, nullptr, 0);
    return off;
  }
  void nestEnd(size_t off) {
    at<rtattr>(off)->rta_len = static_cast<unsigned short>(buf_.size() - off);
  }

 private:
  void append(const void* p, size_t len) {
    size_t start = buf_.size();
    buf_.resize(start + NLMSG_ALIGN(len), 0);
    std::memcpy(buf_.data() + start, p, len);
    sync();
  }
  void sync() { hdr()->nlmsg_len = static_cast<uint32_t>(buf_.size()); }

  std::vector<uint8_t> buf_;
};

// A dump request of every object of one family: the fixed header T
// (ifaddrmsg, rtmsg, ...) zeroed but for its first byte, which in each of them
// is the address family.
template <typename T>
NlMsg buildFamilyDumpMsg(uint16_t type, int family) {
  NlMsg m(type, 0);
  T fixed{};
  *reinterpret_cast<uint8_t*>(&fixed) = static_cast<uint8_t>(family);
  m.put(fixed);
  return m;
}

// Attributes after a fixed header: table[type] = rtattr* (or nullptr).
struct Attrs {
  static constexpr int kMax = 64;
  const rtattr* tb[kMax] = {};

  Attrs(const void* start, size_t len) { parse(start, len); }
  Attrs() = default;

  void parse(const void* start, size_t len) {
    std::memset(tb, 0, sizeof tb);
    auto* a = static_cast<const rtattr*>(start);
    int rem = static_cast<int>(len);
    for (; RTA_OK(a, rem); a = RTA_NEXT(a, rem)) {
      unsigned t = a->rta_type & NLA_TYPE_MASK;
      if (t < kMax) tb[t] = a;
    }
  }
  // Attributes of a nested attribute.
  static Attrs nested(const rtattr* a) { return Attrs(RTA_DATA(a), RTA_PAYLOAD(a)); }

  const rtattr* get(unsigned t) const { return t < kMax ? tb[t] : nullptr; }
  bool has(unsigned t) const { return get(t) != nullptr; }
  uint32_t u32(unsigned t, uint32_t dflt = 0) const {
    auto* a = get(t);
    if (!a || RTA_PAYLOAD(a) < 4) return dflt;
    uint32_t v;
    std::memcpy(&v, RTA_DATA(a), 4);
    return v;
  }
  uint8_t u8(unsigned t, uint8_t dflt = 0) const {
    auto* a = get(t);
    if (!a || RTA_PAYLOAD(a) < 1) return dflt;
    return *static_cast<const uint8_t*>(RTA_DATA(a));
  }
  std::string str(unsigned t) const {
    auto* a = get(t);
    if (!a) return "";
    const char* p = static_cast<const char*>(RTA_DATA(a));
    return std::string(p, strnlen(p, RTA_PAYLOAD(a)));
  }
};

// The fixed header T (ifinfomsg, rtmsg, ...) of a message of `type`, with the
// attributes after it parsed into at; nullptr for another type or a short one.
template <typename T>
const T* fixedHeaderOf(const nlmsghdr* h, uint16_t type, Attrs& at) {
  if (h->nlmsg_type != type || h->nlmsg_len < NLMSG_LENGTH(sizeof(T))) return nullptr;
  auto* fixed = static_cast<const T*>(NLMSG_DATA(h));
  at.parse(reinterpret_cast<const uint8_t*>(fixed) + NLMSG_ALIGN(sizeof(T)), h->nlmsg_len - NLMSG_LENGTH(sizeof(T)));
  return fixed;
}

}  // namespace np
