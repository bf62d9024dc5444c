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
// # Lease sizing
//
// S = global-slack × rate × 1 s is what all hosts together may hold of one
// key. The script counts the hosts that asked for the key within the
// horizon (1.25 × the lease life) and gives each a cap of
// H = max(S / hosts, one packet of any size), granting no host more than its
// cap minus what it holds: once every host has asked with the same count,
// all together hold at most max(S, hosts packets). A host keeps what it
// was granted under an earlier, larger cap until its next ask (at most a
// lease's life): while hosts arrive they may hold more (up to
// S × (1 + 1/2 + … + 1/N) in the worst order), which is better than
// starving the newcomers until the first host has spent its lease. A host
// asks for about two seconds of its demand, at most its cap, when its lease
// falls below the low-water mark (demand × a few poll intervals and round
// trips) or a packet found it short, when it expires (a token bucket's
// lease lives 4 s on the host's clock; a fixed window's ends with its
// window, converted from the time left that the store reports) and, for a
// key still active, before it expires. A host the store could not serve in
// full waits, before asking again, until its ask may have refilled in turn
// with the other hosts that went short (at most half the time until the
// bucket would be full, so that a late ask loses no tokens): hosts that all
// want more than there is take turns, each getting about its cap per ask,
// and the asks per second stay about hosts / global-slack per saturated key
// (up to twice that with a burst under 2 × S), whatever the packet rate.
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
// cannot have expired) restarts empty too. Host fields are counted at most
// maxHosts (256) times, expire after the horizon, and a hash with more
// fields than 256 hosts write loses all but the budget's state and the
// asker's at its next ask, without being read.
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
// fake hosts) the bound holds as well, and the real hosts keep their fair
// share of the rate: a fake host shrinks the caps (at most to S / 257),
// never the budget. A writer that writes values packetshaper could have
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
