package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/e31net/e31/pkg/auth"
)

// TestCredsTLS makes the authority and a server certificate with `e31 creds
// tls`, and checks that the certificate verifies for every host asked for
// and no other, as a server to clients and as a client to another server
// (the cluster routes), that a TLS handshake with both ends checking the
// other succeeds, and that a second run keeps the authority.
func TestCredsTLS(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	keys, out := filepath.Join(dir, "keys"), filepath.Join(dir, "nats")
	hosts := []string{"nats-1", "nats-2", "nats-3", "localhost", "127.0.0.1"}
	stdout, errOut, code := execute3("creds", "tls", "--dir", keys, "--hosts", strings.Join(hosts, ","), "-o", out)
	if code != 0 || !strings.Contains(stdout, "made the TLS authority") {
		t.Fatalf("creds tls: exit %d: %s %s", code, stdout, errOut)
	}
	for name, mode := range map[string]os.FileMode{
		filepath.Join(keys, auth.TLSCAKeyFile): 0o600, filepath.Join(out, auth.TLSCertKeyFile): 0o600, filepath.Join(out, auth.TLSCAOutFile): 0o644,
	} {
		if st, err := os.Stat(name); err != nil || st.Mode().Perm() != mode {
			t.Errorf("%s: %v, mode %v; want %v", name, err, st.Mode().Perm(), mode)
		}
	}
	caPEM := readTLSFile(t, filepath.Join(out, auth.TLSCAOutFile))
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("ca.pem holds no certificate")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(out, auth.TLSCertFile), filepath.Join(out, auth.TLSCertKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
		for _, h := range hosts {
			if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("certificate for %s (usage %v): %v", h, usage, err)
			}
		}
	}
	for _, h := range []string{"nats-4", "example.com", "10.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots}); err == nil {
			t.Errorf("certificate verifies for %s, which was not asked for", h)
		}
	}

	// Both ends present the certificate and check the other's, as two
	// NATS servers do on a route.
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{
		Certificates: []tls.Certificate{pair}, ClientCAs: roots, ClientAuth: tls.RequireAndVerifyClientCert, MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			err = c.(*tls.Conn).Handshake()
			c.Close()
		}
		served <- err
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	c, err := tls.Dial("tcp", net.JoinHostPort("localhost", port), &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: "nats-2", MinVersion: tls.VersionTLS12,
	})
	if err != nil {
		t.Fatalf("handshake as a route: %v", err)
	}
	c.Close()
	if err := <-served; err != nil {
		t.Fatalf("the server's end of the handshake: %v", err)
	}

	// Again, with other hosts: a new certificate, the same authority, so
	// that every client's ca.pem stays good.
	stdout, errOut, code = execute3("creds", "tls", "--dir", keys, "--hosts", "nats-4", "-o", out)
	if code != 0 || !strings.Contains(stdout, "kept the TLS authority") {
		t.Fatalf("creds tls again: exit %d: %s %s", code, stdout, errOut)
	}
	if !bytes.Equal(readTLSFile(t, filepath.Join(out, auth.TLSCAOutFile)), caPEM) {
		t.Error("a second run replaced the authority")
	}
	b, _ := pem.Decode(readTLSFile(t, filepath.Join(out, auth.TLSCertFile)))
	if b == nil {
		t.Fatal("server.pem is not PEM")
	}
	again, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := again.Verify(x509.VerifyOptions{DNSName: "nats-4", Roots: roots}); err != nil {
		t.Errorf("the new certificate under the kept authority: %v", err)
	}

	for _, args := range [][]string{
		{"creds", "tls", "--hosts", "nats-1"},
		{"creds", "tls", "--dir", keys},
		{"creds", "tls", "--dir", keys, "--hosts", " "},
	} {
		if _, _, code := execute3(args...); code != 2 {
			t.Errorf("e31 %s: exit %d, want 2", strings.Join(args, " "), code)
		}
	}
}

func readTLSFile(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
