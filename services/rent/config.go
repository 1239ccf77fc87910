package rent

import "flag"

// Flags defines on fs the flags that set c: the instance's name, and how
// nodes' cards are checked.
func (c *Config) Flags(fs *flag.FlagSet) {
	// Each instance reads the log on a consumer named after it: two
	// instances on one host need names of their own.
	fs.StringVar(&c.Instance, "instance", "", "this instance's name, for its consumer of the log (default: the host name; give each instance on one host its own)")
	fs.StringVar(&c.NodeCardsKey, "node-cards-key", "", "the operator's card key (cards.pub of 'e31 creds init', or its text ed25519:...): a node is held to the capacity of the card it signed")
	fs.BoolVar(&c.RequireNodeCards, "require-node-cards", false, "hold nothing on a node that presents no card signed by --node-cards-key")
}
