module github.com/e31net/e31/services/run

go 1.26.0

require (
	github.com/containerd/cgroups/v3 v3.1.3
	github.com/e31net/e31/pkg v0.0.0
	github.com/google/uuid v1.6.0
	github.com/nats-io/nats.go v1.56.0
	github.com/opencontainers/runtime-spec v1.3.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/ThreeDotsLabs/watermill v1.5.1 // indirect
	github.com/cenkalti/backoff/v5 v5.0.3 // indirect
	github.com/cilium/ebpf v0.16.0 // indirect
	github.com/containerd/log v0.1.0 // indirect
	github.com/coreos/go-systemd/v22 v22.5.0 // indirect
	github.com/docker/go-units v0.5.0 // indirect
	github.com/godbus/dbus/v5 v5.1.0 // indirect
	github.com/klauspost/compress v1.20.4 // indirect
	github.com/lithammer/shortuuid/v3 v3.0.7 // indirect
	github.com/moby/sys/userns v0.1.0 // indirect
	github.com/nats-io/nkeys v0.4.17 // indirect
	github.com/nats-io/nuid v1.0.1 // indirect
	github.com/oklog/ulid v1.3.1 // indirect
	github.com/pkg/errors v0.9.1 // indirect
	github.com/sirupsen/logrus v1.9.3 // indirect
	github.com/sony/gobreaker v1.0.0 // indirect
	golang.org/x/crypto v0.58.0 // indirect
	golang.org/x/exp v0.0.0-20241108190413-2d47ceb2692f // indirect
	google.golang.org/protobuf v1.36.8 // indirect
)

replace github.com/e31net/e31/pkg => ../../pkg
