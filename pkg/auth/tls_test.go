package auth

import (
	"bytes"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestTLSAuthorityIsKeptAndSignsForItsHostsOnly makes an authority and a
// server certificate, checks that the certificate verifies for the hosts
// asked for and no other, that a second load keeps the authority, and that
// half an authority is refused rather than silently replaced.
func TestTLSAuthorityIsKeptAndSignsForItsHostsOnly(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	now := time.Now()
	ca, made, err := LoadOrMakeCA(dir, now)
	if err != nil || !made {
		t.Fatalf("LoadOrMakeCA: made %v, %v", made, err)
	}
	certPEM, _, err := ca.IssueServerCert([]string{"nats-1", " ", "127.0.0.1"}, now, 24*time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	b, _ := pem.Decode(certPEM)
	leaf, err := x509.ParseCertificate(b.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, h := range []string{"nats-1", "127.0.0.1"} {
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: h, Roots: roots}); err != nil {
			t.Errorf("certificate for %s: %v", h, err)
		}
	}
	if _, err := leaf.Verify(x509.VerifyOptions{DNSName: "nats-2", Roots: roots}); err == nil {
		t.Error("certificate verifies for nats-2, which was not asked for")
	}
	if _, _, err := ca.IssueServerCert([]string{" "}, now, time.Hour); !errors.Is(err, ErrNoHosts) {
		t.Errorf("no hosts: %v, want ErrNoHosts", err)
	}
	again, made, err := LoadOrMakeCA(dir, now)
	if err != nil || made || !bytes.Equal(again.PEM(), ca.PEM()) {
		t.Fatalf("second load: made %v, same %v, %v", made, bytes.Equal(again.PEM(), ca.PEM()), err)
	}
	if err := os.Remove(filepath.Join(dir, TLSCAKeyFile)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := LoadOrMakeCA(dir, now); err == nil {
		t.Error("half an authority was accepted")
	}
}
