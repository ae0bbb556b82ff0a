// nftables for the layers above dataplane/: a script runs as one atomic
// transaction through libnftables in the addon (loaded on first use). Each
// caller owns one table and names it in its script; nothing here lists or
// flushes the whole ruleset.
export { nftAvailable, nftRun, nftRunAsync } from '../../native/nft.js';
