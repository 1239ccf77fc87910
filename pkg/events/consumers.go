package events

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// ConsumerName is the durable consumer a reader of the log in the group
// durable (every instance of a service shares one) reads topic with: topic
// is one or more subject filters separated by spaces. It is the durable
// and each filter, dots as dashes, '*' as "any" and '>' as "all", or, past
// 64 characters, the durable and a digest of the topic. The names are part
// of the contract: a node's permissions name its consumers (NodeConsumers),
// and the metrics name every service's.
func ConsumerName(durable, topic string) string {
	var b strings.Builder
	b.WriteString(durable)
	for _, f := range strings.Fields(topic) {
		b.WriteByte('_')
		for _, r := range f {
			switch r {
			case '.':
				b.WriteByte('-')
			case '*':
				b.WriteString("any")
			case '>':
				b.WriteString("all")
			default:
				b.WriteRune(r)
			}
		}
	}
	name := b.String()
	if len(name) > 64 {
		sum := sha256.Sum256([]byte(topic))
		name = durable + "_" + hex.EncodeToString(sum[:8])
	}
	return name
}

// NodeConsumer is one durable consumer a run node reads: made for it by
// the node gate (pkg/gate), read by the node by name, which its
// permissions name (pkg/auth).
type NodeConsumer struct {
	// Handler names what the node does with it.
	Handler string
	// Topic is what it filters on (filters separated by spaces), Durable
	// the group the node reads it as.
	Topic, Durable string
}

// Name is the consumer's name on the server.
func (c NodeConsumer) Name() string { return ConsumerName(c.Durable, c.Topic) }

// NodeConsumers are the consumers node reads: the holds on it, and every
// cancel (it stops the jobs it runs that are cancelled).
func NodeConsumers(node string) []NodeConsumer {
	durable := "run-" + node
	return []NodeConsumer{
		{Handler: "held", Topic: HeldSubject(node), Durable: durable},
		{Handler: "cancel", Topic: KindSubject(TypeCancelRequested), Durable: durable},
	}
}
