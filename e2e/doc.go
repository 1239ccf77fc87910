// Package e2e tests e31 across processes and containers: the e31 binary,
// built static, runs in images built FROM scratch (no registry is needed),
// and the tests drive it from the host with the same binary, as a user
// would. Run with `make e2e` (part of `make test`); it needs a Docker engine
// and fails, rather than skips, without one.
package e2e
