// Package gate is the node gate: what a run node may ask of e31 that its
// permissions cannot give it by subject, served in E31 by OUTPUT.
//
// # Why
//
// A run node lives in an account of its own (NODES, see pkg/auth) with no
// JetStream, and reaches E31 only through the imports that account has. Its
// permissions bind what it publishes to its own name, but two things it
// needs cannot be bound so:
//
//   - the data of the jobs held on it. A submitter's staged inputs, its
//     jobs' output and logs are objects of one bucket; reading an object
//     takes a direct get whose subject names the bucket, not the object
//     (the request's body says which), and writing one takes a chunk subject
//     of a random name. A permission can give a node every submitter's
//     bucket or none. So the node asks the gate, naming the job and attempt,
//     and the gate checks in the log, before each request, that the attempt
//     is held on that node and not over (stopped, lost, released; it looks
//     again whenever something is published about the job, and at least
//     every second): inputs of
//     the job are read (the objects its staged data is stored in: its files,
//     folders, the output of the job it stages from), its logs and output
//     are written (a blob only with the bytes its name is the digest of, a
//     part list only if its parts join to the file it names, a log only
//     under the attempt's own names), and nothing else. Another job's input,
//     or its own job's once the hold is over, is refused with ErrRefused.
//     No key or token travels in the job's spec, which every node reads.
//   - its consumers. A consumer create request says in its body where a
//     push consumer delivers, any subject of E31 (a lease, the log), and no
//     permission can look into the body. So the node asks the gate to make
//     its two pull consumers (NodeConsumers), of the config it proposes,
//     which the gate checks (the node's names and filters, pull only) before
//     it makes them; the node may then only pull from and ack them.
//
// The node names itself by the subject it asks on (events.GateSubject),
// which only it may publish on.
//
// # Why in OUTPUT
//
// A service never imports another, and this needs a service: a node's
// request must be answered by something that holds the right to every
// submitter's bucket and to make consumers on the log. OUTPUT holds both
// already (it verifies, returns and deletes what jobs store; it makes its
// own consumers), and the gate adds no right to it but that of answering a
// request more than once (a streamed read). A job needs OUTPUT to end
// anyway, so the gate adds no service a job did not depend on. Its
// lease, a node keeps without the gate (events.NodeLeasesBucket): a node
// must not be counted lost because a service restarts.
//
// # The protocol
//
// Requests go to events.GateSubject(node, op); bodies are JSON (Request),
// replies come to the asker's inbox. Every reply that is an error carries
// HeaderError, a code (CodeRefused, CodeNotFound, …), and the message as
// its body.
//
//   - consumer: the body is a jetstream.ConsumerConfig; the reply is empty.
//   - stat: the reply is Info (size and digest) of the object.
//   - get: the reply is the object, in pieces of at most ChunkBytes, each
//     with HeaderPart (0, 1, …), and then an empty message with HeaderEnd
//     (how many pieces came). One request, one streamed answer: an object
//     is at most a part of a file (stage.PartSize) or a manifest.
//   - put: the reply is Session: where to send the object's pieces
//     (events.GateChunkSubject), one request each with HeaderPart, the last
//     one with HeaderEnd too. Each is answered once written; the last with
//     the outcome of storing the whole. One gate instance takes a session
//     from start to end.
//
// A Client is a node's side of it: it makes consumers and gives a
// stage.Store per attempt. A Server is the gate. Both are safe for
// concurrent use.
package gate
