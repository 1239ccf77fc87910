// Package lease keeps short-lived claims in a JetStream KV bucket: a run
// node's "I am alive" and a scheduler's "I am the one deciding". A lease is
// a key whose value names its owner; the bucket's TTL removes it unless the
// owner renews it, and a watcher sees the removal. Renewal is
// compare-and-set on the key's revision, so an owner that was presumed dead
// learns it at its next renewal.
//
// # Fencing: an owner stops before anyone may count it gone
//
// Learning it at the next renewal is too late for a run node: a node cut
// off from NATS cannot renew, and its jobs would run on while the pool
// counts the node lost and holds them again elsewhere (two attempts of one
// job at once, for as long as the partition lasts). So the owner also acts
// on its own clock. Each renewal counts from the moment its request was
// sent, on the owner's monotonic clock (Go's time.Now carries one): the
// server stored it at that moment or later, so the key cannot expire before
// TTL after it, as the owner counts. [Lease.KeepFenced] fences (and
// returns [ErrFenced]) once no renewal can be shown for TTL less the fence
// margin, whatever the connection believes (a silent partition leaves a
// TCP connection open for minutes), on a timer of its own that no stuck
// renewal can hold up; every renewal request's deadline ends by then too.
//
// The timeline of one lease, from the last renewal sent at 0, with the
// default margins ([DefaultMargins]) of a TTL of 10 s:
//
//	0                  renewal sent (the owner's clock)
//	TTL−Fence   7.5 s  the node fences: SIGTERM to every job, no new job starts
//	TTL−Fence/2 8.75 s SIGKILL to whatever is left of them
//	TTL         10 s   the key may expire on the server (stored at 0 or later)
//	TTL+Lapse   12 s   at the earliest, RENT records the node lost (NodeExpired,
//	                   then HoldLost), and only then may the job be held again
//
// Why each margin:
//
//   - Fence (default a quarter of the TTL) is the owner's side. It covers
//     the time a job takes to die after SIGTERM and SIGKILL (a container
//     is killed through the Docker engine), a timer that fires late on a
//     loaded node or in a GC pause, and the owner's clock running slow
//     against the server's. It must be at most half the TTL: the owner
//     renews every TTL/3, and a larger margin would fence at one renewal
//     a little late.
//   - Lapse (default a fifth of the TTL) is the pool's side: RENT counts a
//     node lost only Lapse after it saw the lease gone (the delete marker,
//     or a key found missing), on its own monotonic clock. It covers what
//     makes the server expire a key early as the owner counts: clock rate
//     drift between the owner's and the server's clocks (quartz is good
//     to 10⁻⁴, 1 ms in 10 s; an unsynchronised virtual machine much
//     worse), the offset between two NATS servers' clocks when the
//     bucket's stream leader changes (the new leader expires by its own
//     wall clock a timestamp the old one wrote), and a server's wall clock
//     stepped forward. RENT sees a lapse late, never early, so Lapse adds
//     to TTL, never less.
//
// Together they put at least Fence/2 + Lapse between the last SIGKILL and
// the earliest next hold: 3.25 s at the defaults, far past clock drift,
// and room for a node whose SIGKILL came late. A node whose lease is lost
// for another reason (its renewal answered that the key changed hands)
// stops its jobs at once in the same way. Chubby's and etcd's lease
// fencing are the model; Nomad's disconnect.stop_on_client_after is the
// same idea for a client that lost its servers.
//
// The RENT leader's lease is fenced by [Lease.Valid] instead: it stops
// deciding at TTL/2 without a renewal, and every decision it appends also
// expects the job's last sequence, which a successor's decision changes.
package lease
