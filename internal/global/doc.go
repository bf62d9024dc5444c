// Package global keeps the budgets of packetshaper's global rules in a store
// that several hosts share (Redis, Valkey or a Redis Cluster, through
// github.com/redis/go-redis/v9), without a round trip per packet.
//
// A global rule limits each flow key once for all the hosts that run it.
// Each host takes budget from the store in leases: tokens of one key that a
// Lua script (leaseScript) hands out atomically, on the store's clock, from
// one hash per key whose name carries a hash tag, so that every script
// touches one slot and a Redis Cluster spreads the keys over its masters.
// The engines spend a lease with atomics (shaper.Lease) and never wait; a
// background refresher (one goroutine per Client) asks for more before a
// lease runs out, for many keys at once in pipelines. It does not poll: a
// new key or a lease queued by an engine (shaper.LeaseQueue.SetNotify)
// wakes it, at most once a Poll; otherwise it wakes when an ask it
// scheduled is due, for a probe or the fallback's deadline while the store
// fails, and once a Sweep (renewals, retirements, the share). It reaches
// the store through a small interface (store), so that its decisions are
// unit-tested step by step under a fake store and a fake clock.
//
// # Rate leases and token leases
//
// A token-bucket rule takes rate leases by default (rate.go: a share of
// the rate for an epoch and the next, spent as a local bucket, and a burst
// bucket in the key drawn by the asks; about hosts / I asks per hot key,
// over any T at most burst + rate × T + S), or with Config.TokenLeases the
// token leases below; a fixed-window rule always takes the latter.
//
// # Lease sizing (token leases)
//
// S = rate × max(the refresh interval I (Config.Interval, 1 s), global-slack
// × 1 s) is what all hosts together may hold of one key (for a fixed
// window, I is at most the window). The script counts the hosts that asked
// for the key within the horizon (1.25 × the lease life) with ZCOUNT on a
// sorted set beside the key's hash (KEY:h, the same slot; at most maxHosts,
// expired ones dropped 8 an ask: each ask is O(log hosts), no field per
// host read) and gives each a cap of H = max(S / hosts, one packet of any
// size), granting no host more than its cap minus what it holds. A host
// keeps what it was granted under an earlier, larger cap until its next
// ask (at most a lease's life). A host asks for half an interval of its
// demand, at most its cap, when its lease falls below the low-water mark or
// a packet found it short, when it expires (a token bucket's lease lives
// 4 s on the host's clock; a fixed window's ends with its window) and, for
// a key still active, before it expires. A host the store could not serve
// again gets a slot in the key's queue of visits (the field q: each slot
// after the last by the refill of the host's ask, at most half a
// bucket) and asks at it while the key is active: the hosts of a key above
// its limit come back one after another, each finding about its cap, so
// that the asks per second are about hosts / I per key (2 × rate / burst
// when more), whatever the slack and the packets.
//
// # The bound
//
// Over any interval T, the packets accepted for one key across all N hosts
// are at most burst + rate × T + ΣH (+ 2 packets per host of credit), where
// ΣH is the sum of the hosts' caps at their last asks: N × S/N = S (or N
// packets) once each host has asked since the last one came, at most
// N × S meanwhile:
//
//   - every packet accepted spends a token the store granted, or is a key's
//     first packet on a host, accepted on credit before any grant and charged
//     to the store by that host's next ask;
//   - a token spent in the interval was granted before it — then a host held
//     it when the interval began, at most its cap — or during it;
//   - during the interval the store's bucket hands out (grants and charges)
//     at most what it held at the start (≤ burst) plus its refill
//     (rate × T, on its own clock), plus the debt that charged credit may
//     leave at the end;
//   - leases expire on the host's own clock (from the time the ask was
//     sent), and the store forgets a host only after the horizon on its
//     clock (from the time it served the ask, later): a host holding tokens
//     is always counted among the hosts that share the slack. Hosts measure
//     only durations, so their clocks' offsets change nothing;
//   - a key gets credit on a host only when new there (again only after its
//     lease was retired, idle for two lives): at most one packet per host not
//     yet charged, and one charged but not yet repaid.
//
// For a fixed window, each window of the store's clock accepts at most its
// limit (+ the same credit): grants are counted in the window, and a host's
// lease ends before the window does.
//
// # A store written by others
//
// The script reads every field of a key as untrusted (see leaseScript): a
// value that packetshaper cannot have written (not a finite number, a
// negative time, a token count above the burst, a window far ahead, a
// state missing from a key that exists) counts as an empty bucket or a
// spent window, never a full one; a time ahead of the store's clock is its
// now; a debt is cut to what the hosts' credit can make. A key that a host
// held a lease of within the horizon and finds gone (a FLUSHALL, a DEL, a
// restart without persistence: the key's TTL outlives the horizon, so it
// cannot have expired) restarts empty too. Hosts are counted at most
// maxHosts (16 384) times, expire after the horizon, and a hosts set or a
// hash with more entries than maxHosts hosts write is dropped (but for the
// budget's state and the asker's) at the next ask, without being read.
//
// So under a writer that may flush or delete keys at any time, the bound
// above holds with ΣH ≤ N × S (the hosts are counted again as they ask)
// and one packet of forgiven credit per host and flush: a flush grants
// nothing, it only loses the bucket's refill (what the bucket held, at most
// the burst: burst / rate seconds of refill). Only a host's first ask of a
// key (a lease new on that host) can find the key gone and make it full,
// as it would without the writer. Under a writer that rewrites fields with
// values packetshaper cannot have written (a huge, NaN or infinite token
// count, NaN, infinite, negative or future times, a negative count, 5000
// fake hosts) the bound holds as well: a fake host shrinks the caps (at
// most to one packet), never the budget. A writer that writes values packetshaper could have
// written (a full bucket's count, an old time, a window's count of 0) is
// indistinguishable from the script: each such write may grant up to one
// burst (or window's limit). Keep such writers out with a Redis ACL that
// lets packetshaper's user run only its script on its key prefix (see the
// README) and no one else write that prefix.
//
// # When the store is gone
//
// A request that fails or takes longer than the timeout is counted as an
// error. When requests have failed for timeout + grace (100 ms) with none
// answered, every global rule falls back to a local limit of its rate (and
// burst) × max(this host's recent share of the grants, 1 / the most hosts it
// saw for a key): the engines limit each flow locally, with no lease. It is
// logged once, and shown in the stats and metrics. The refresher tries the
// store every 200 ms (asking for the leases of the keys active meanwhile,
// or PING); when all are answered the rules go back to leases, and that too
// is logged once. The engines never wait for any of it.
package global
