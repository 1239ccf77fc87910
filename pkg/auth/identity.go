package auth

import (
	"errors"
	"fmt"
	"slices"

	"github.com/e31net/e31/pkg/events"
)

// Role is what an identity is for.
type Role string

// The roles.
const (
	// Submitter submits, reads and cancels its own jobs.
	Submitter Role = "submitter"
	// Auditor reads the whole log and every record, and changes nothing.
	Auditor Role = "auditor"
	// Operator may do everything: it runs the system.
	Operator Role = "operator"
	// Service is one instance of one of e31's services (Identity.Service).
	Service Role = "service"
)

// Roles lists every role.
var Roles = []Role{Submitter, Auditor, Operator, Service}

// The services, by the name `e31 serve` knows them by.
const (
	SubmitService  = "submit"
	RentService    = "rent"
	RunService     = "run"
	OutputService  = "output"
	ReleaseService = "release"
	LedgerService  = "ledger"
)

// Services lists every service.
var Services = []string{SubmitService, RentService, RunService, OutputService, ReleaseService, LedgerService}

// ErrIdentity is wrapped by every error about an identity that cannot be.
var ErrIdentity = errors.New("auth: invalid identity")

// Identity is one user of the bus.
type Identity struct {
	Role Role
	// Name is the user's name. A submitter's is its submitter id, the token
	// that ends its subjects; a run service's is its node's id; for other
	// services it names the instance (e.g. rent-1).
	Name string
	// Service is the service of a Service identity.
	Service string
}

// String is e.g. "submitter alice" or "service run node-1".
func (id Identity) String() string {
	if id.Role == Service {
		return fmt.Sprintf("%s %s %s", id.Role, id.Service, id.Name)
	}
	return fmt.Sprintf("%s %s", id.Role, id.Name)
}

// Validate reports whether the identity can be given credentials.
func (id Identity) Validate() error {
	if !events.ValidID(id.Name) {
		return fmt.Errorf("%w: name %q: letters, digits, '-' and '_', at most 64, starting with a letter or digit", ErrIdentity, id.Name)
	}
	switch id.Role {
	case Submitter:
		// These names carry meaning in subjects: a submitter called
		// "operator" could cancel every job, one called "output" could ask
		// e31.api.output.stored about everyone's data.
		if id.Name == events.Operator || id.Name == AuditorName || slices.Contains(Services, id.Name) {
			return fmt.Errorf("%w: %q is reserved: no submitter may be called that", ErrIdentity, id.Name)
		}
	case Service:
		if !slices.Contains(Services, id.Service) {
			return fmt.Errorf("%w: service %q: expected one of %v", ErrIdentity, id.Service, Services)
		}
	case Auditor, Operator:
	default:
		return fmt.Errorf("%w: role %q: expected one of %v", ErrIdentity, id.Role, Roles)
	}
	if id.Role != Service && id.Service != "" {
		return fmt.Errorf("%w: only a service identity names a service", ErrIdentity)
	}
	return nil
}

// Principal is who the identity acts as in subjects: a submitter's own
// name, "auditor" for every auditor and "operator" for every operator (the
// names the query services and cancels recognize, SeesAll and
// events.MayCancel), a service's name.
func (id Identity) Principal() string {
	switch id.Role {
	case Auditor:
		return AuditorName
	case Operator:
		return events.Operator
	}
	return id.Name
}

// InboxPrefix is the prefix of the identity's reply subjects (nats.go's
// CustomInboxPrefix): only this identity may subscribe under it. The role
// (and a service's service) is part of it, so that names need be unique
// only within a role: a submitter called node-1 never shares node-1's
// replies.
func (id Identity) InboxPrefix() string {
	if id.Role == Service {
		return "_INBOX_service_" + id.Service + "_" + id.Name
	}
	return "_INBOX_" + string(id.Role) + "_" + id.Name
}

// IsNode reports whether the identity is a run node (the service run, one
// per node, named after it): a user of the NODES account, which may speak
// only for itself and the jobs held on it.
func (id Identity) IsNode() bool { return id.Role == Service && id.Service == RunService }
