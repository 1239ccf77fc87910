package compromised_test

import (
	"bytes"
	"crypto/ed25519"
	"crypto/x509"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math"
	"os"
	"path/filepath"
)

// A compromised node holds what its operator gave it: its credentials,
// its card (the operator's word for its name, key and capacity) and its
// own signing key, with which it signs the stops it reports, as
// pkg/chain/NODES.md defines (e31.stop.v1), written here from that text
// alone, as the rest of this module knows e31.

// rogueDir is where `e31 creds node` wrote the rogue's files.
func rogueDir() string { return filepath.Join(credsDir, rogue+".node") }

// rogueCard is the rogue's card, as the operator signed it.
func rogueCard() (json.RawMessage, error) {
	b, err := os.ReadFile(filepath.Join(rogueDir(), "node.card"))
	if err != nil {
		return nil, fmt.Errorf("the rogue's card: %w", err)
	}
	return json.RawMessage(b), nil
}

// rogueKey is the rogue's signing key (a PKCS #8 PEM file).
func rogueKey() (ed25519.PrivateKey, error) {
	b, err := os.ReadFile(filepath.Join(rogueDir(), "node.key"))
	if err != nil {
		return nil, fmt.Errorf("the rogue's key: %w", err)
	}
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, fmt.Errorf("the rogue's key: no PEM block")
	}
	k, err := x509.ParsePKCS8PrivateKey(blk.Bytes)
	if err != nil {
		return nil, fmt.Errorf("the rogue's key: %w", err)
	}
	key, ok := k.(ed25519.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("the rogue's key is a %T, not ed25519", k)
	}
	return key, nil
}

// stopBody is what e31.stop.v1 covers of a RunStopped body.
type stopBody struct {
	Attempt     uint64  `json:"attempt"`
	Node        string  `json:"node"`
	CPU         float64 `json:"cpu"`
	MemoryBytes int64   `json:"memory_bytes"`
	GPU         int64   `json:"gpu"`
	DiskBytes   int64   `json:"disk_bytes"`
	Outcome     string  `json:"outcome"`
	ExitCode    *int64  `json:"exit_code"`
	Reason      string  `json:"reason"`
	Usage       struct {
		CPUSeconds  float64 `json:"cpu_seconds"`
		MaxRSSBytes int64   `json:"max_rss_bytes"`
	} `json:"usage"`
	Output struct {
		Files []struct {
			Path   string `json:"path"`
			Bytes  int64  `json:"bytes"`
			Digest string `json:"digest"`
			Mode   string `json:"mode"`
		} `json:"files"`
		Missing  []string `json:"missing"`
		Bytes    int64    `json:"bytes"`
		Declared []struct {
			Path     string `json:"path"`
			Required bool   `json:"required"`
		} `json:"declared"`
		Manifest string `json:"manifest"`
		Count    int64  `json:"count"`
	} `json:"output"`
	Logs *struct {
		StdoutBytes int64 `json:"stdout_bytes"`
		StderrBytes int64 `json:"stderr_bytes"`
		Truncated   bool  `json:"truncated"`
	} `json:"logs"`
}

// signStop signs the stop body of job with key, adding its signature and
// signing_key.
func signStop(job string, body map[string]any, key ed25519.PrivateKey) error {
	raw, err := json.Marshal(body)
	if err != nil {
		return err
	}
	var s stopBody
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	var b bytes.Buffer
	u8 := func(v uint8) { b.WriteByte(v) }
	u32 := func(v uint32) { _ = binary.Write(&b, binary.BigEndian, v) }
	u64 := func(v uint64) { _ = binary.Write(&b, binary.BigEndian, v) }
	i64 := func(v int64) { _ = binary.Write(&b, binary.BigEndian, v) }
	f64 := func(v float64) { u64(math.Float64bits(v)) }
	str := func(v string) { u32(uint32(len(v))); b.WriteString(v) }
	flag := func(v bool) {
		if v {
			u8(1)
		} else {
			u8(0)
		}
	}
	b.WriteString("e31.stop.v1\n")
	str(job)
	u64(s.Attempt)
	str(s.Node)
	f64(s.CPU)
	i64(s.MemoryBytes)
	i64(s.GPU)
	i64(s.DiskBytes)
	str(s.Outcome)
	if s.ExitCode == nil {
		u8(0)
	} else {
		u8(1)
		i64(*s.ExitCode)
	}
	str(s.Reason)
	f64(s.Usage.CPUSeconds)
	i64(s.Usage.MaxRSSBytes)
	u32(uint32(len(s.Output.Files)))
	for _, f := range s.Output.Files {
		str(f.Path)
		i64(f.Bytes)
		str(f.Digest)
		str(f.Mode)
	}
	u32(uint32(len(s.Output.Missing)))
	for _, m := range s.Output.Missing {
		str(m)
	}
	i64(s.Output.Bytes)
	u32(uint32(len(s.Output.Declared)))
	for _, d := range s.Output.Declared {
		str(d.Path)
		flag(d.Required)
	}
	str(s.Output.Manifest)
	i64(s.Output.Count)
	if s.Logs == nil {
		u8(0)
	} else {
		u8(1)
		i64(s.Logs.StdoutBytes)
		i64(s.Logs.StderrBytes)
		flag(s.Logs.Truncated)
	}
	body["signature"] = base64.StdEncoding.EncodeToString(ed25519.Sign(key, b.Bytes()))
	body["signing_key"] = "ed25519:" + base64.StdEncoding.EncodeToString(key.Public().(ed25519.PublicKey))
	return nil
}
