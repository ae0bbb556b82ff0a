// The host veth's IPv6 link-local address (its name is model/names.ts's hostVethName).
/**
 * The EUI-64 link-local address the kernel derives from a MAC (RFC 4291 appendix A):
 * ee:ee:ee:ee:ee:ee -> fe80::ecee:eeff:feee:eeee.
 */
export function linkLocalFromMac(mac: string): string {
  const b = mac.split(':').map((x) => parseInt(x, 16));
  if (b.length !== 6 || b.some((x) => !(x >= 0 && x <= 255)))
    throw new TypeError(`linkLocalFromMac: not a MAC address: ${JSON.stringify(mac)}`);
  const e = [b[0]! ^ 0x02, b[1]!, b[2]!, 0xff, 0xfe, b[3]!, b[4]!, b[5]!];
  const groups: string[] = [];
  for (let i = 0; i < 8; i += 2) groups.push(((e[i]! << 8) | e[i + 1]!).toString(16));
  return `fe80::${groups.join(':')}`;
}
