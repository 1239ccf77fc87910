package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"io/fs"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// The files `e31 creds tls` writes. The authority's key stays in the keys
// directory with the account keys; the rest goes to the servers (the
// certificate and its key) and to every client (the authority's
// certificate, for E31_TLS_CA).
const (
	tlsCAFile      = "tls-ca.pem"
	tlsCAKeyFile   = "tls-ca-key.pem"
	tlsCAOutFile   = "ca.pem"
	tlsCertFile    = "server.pem"
	tlsCertKeyFile = "server-key.pem"
)

// caValidity is how long the authority is valid. Every client trusts it,
// so replacing it means handing every client a new file: it outlives many
// server certificates.
const caValidity = 10 * 365 * 24 * time.Hour

func credsTLSCmd(a *app) *cobra.Command {
	var dir, out string
	var hosts []string
	var days int
	cmd := &cobra.Command{
		Use:   "tls",
		Short: "Make the TLS authority and the NATS servers' certificate, offline",
		Long: `Make a TLS authority in --dir (once: an existing one is kept, so that the
clients' copy stays valid) and sign with it one certificate for the NATS
servers, valid for every name and address in --hosts. Written to --out:
` + tlsCAOutFile + ` (the authority: give it to every client, E31_TLS_CA), ` + tlsCertFile + ` and
` + tlsCertKeyFile + ` (for the servers only).

The certificate serves the client port and the cluster routes alike: every
server presents it and checks its peers' against the authority, so list
every name the servers reach each other by and every name clients use.

  e31 creds tls --dir KEYS --hosts nats-1,nats-2,nats-3,localhost,127.0.0.1 --out nats/

Run it again with other --hosts, or before --days pass, to make a new
certificate under the same authority.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" || len(hosts) == 0 {
				return usageErr("--dir and --hosts are required")
			}
			if days < 1 {
				return usageErr("--days must be positive")
			}
			if out == "" {
				out = dir
			}
			now := time.Now()
			ca, caKey, made, err := loadOrMakeCA(dir, now)
			if err != nil {
				return err
			}
			certPEM, keyPEM, err := issueServerCert(ca, caKey, hosts, now, time.Duration(days)*24*time.Hour)
			if err != nil {
				return usageErr("%v", err)
			}
			if err := os.MkdirAll(out, 0o755); err != nil {
				return err
			}
			caPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Raw})
			for _, f := range []struct {
				name string
				data []byte
				mode fs.FileMode
			}{
				{tlsCAOutFile, caPEM, 0o644},
				{tlsCertFile, certPEM, 0o644},
				{tlsCertKeyFile, keyPEM, 0o600},
			} {
				if err := writeFileMode(filepath.Join(out, f.name), f.data, f.mode); err != nil {
					return err
				}
			}
			if made {
				fmt.Fprintf(a.out, "made the TLS authority in %s\n", filepath.Join(dir, tlsCAFile))
			} else {
				fmt.Fprintf(a.out, "kept the TLS authority in %s\n", filepath.Join(dir, tlsCAFile))
			}
			fmt.Fprintf(a.out, "%s: for %s, valid until %s\n", filepath.Join(out, tlsCertFile), strings.Join(hosts, ", "),
				now.Add(time.Duration(days)*24*time.Hour).UTC().Format(time.DateOnly))
			fmt.Fprintf(a.out, "clients: --tls-ca %s (or E31_TLS_CA)\n", filepath.Join(out, tlsCAOutFile))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&dir, "dir", "", "the keys directory: the authority's key is kept there")
	f.StringSliceVar(&hosts, "hosts", nil, "the servers' host names and IP addresses (comma separated)")
	f.StringVarP(&out, "out", "o", "", "where the certificate, its key and the authority's certificate go (default --dir)")
	f.IntVar(&days, "days", 825, "how long the servers' certificate is valid")
	return cmd
}

// writeFileMode writes data to name with exactly mode, also when the file
// was there before with another.
func writeFileMode(name string, data []byte, mode fs.FileMode) error {
	if err := os.WriteFile(name, data, mode); err != nil {
		return err
	}
	return os.Chmod(name, mode)
}

// loadOrMakeCA returns the TLS authority kept in dir, making it if there
// is none; made says which.
func loadOrMakeCA(dir string, now time.Time) (ca *x509.Certificate, key crypto.Signer, made bool, err error) {
	certFile, keyFile := filepath.Join(dir, tlsCAFile), filepath.Join(dir, tlsCAKeyFile)
	certPEM, errCert := os.ReadFile(certFile)
	keyPEM, errKey := os.ReadFile(keyFile)
	switch {
	case errCert == nil && errKey == nil:
		ca, key, err := parseCA(certPEM, keyPEM)
		if err != nil {
			return nil, nil, false, fmt.Errorf("tls authority in %s: %w", dir, err)
		}
		return ca, key, false, nil
	case !errors.Is(errCert, fs.ErrNotExist) && errCert != nil:
		return nil, nil, false, errCert
	case !errors.Is(errKey, fs.ErrNotExist) && errKey != nil:
		return nil, nil, false, errKey
	case (errCert == nil) != (errKey == nil):
		// Half an authority: making a new one would silently void every
		// client's copy of the old.
		return nil, nil, false, fmt.Errorf("tls authority in %s: %s and %s must both be there or both be missing", dir, tlsCAFile, tlsCAKeyFile)
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, false, err
	}
	sn, err := serial()
	if err != nil {
		return nil, nil, false, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: "e31 TLS authority", Organization: []string{"e31"}},
		// An hour back, so that a server whose clock is a little behind
		// does not refuse a certificate made just now.
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(caValidity),
		IsCA:                  true,
		BasicConstraintsValid: true,
		// It signs server certificates and nothing else: no intermediates.
		MaxPathLenZero: true,
		KeyUsage:       x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &priv.PublicKey, priv)
	if err != nil {
		return nil, nil, false, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, false, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, nil, false, err
	}
	// The key first: a certificate without its key would be half an
	// authority on the next run.
	if err := writeFileMode(keyFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), 0o600); err != nil {
		return nil, nil, false, err
	}
	if err := writeFileMode(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, nil, false, err
	}
	ca, err = x509.ParseCertificate(der)
	return ca, priv, true, err
}

func parseCA(certPEM, keyPEM []byte) (*x509.Certificate, crypto.Signer, error) {
	cb, _ := pem.Decode(certPEM)
	kb, _ := pem.Decode(keyPEM)
	if cb == nil || kb == nil {
		return nil, nil, errors.New("not PEM")
	}
	ca, err := x509.ParseCertificate(cb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	k, err := x509.ParsePKCS8PrivateKey(kb.Bytes)
	if err != nil {
		return nil, nil, err
	}
	signer, ok := k.(crypto.Signer)
	if !ok || !ca.IsCA {
		return nil, nil, errors.New("not a certificate authority and its key")
	}
	return ca, signer, nil
}

// issueServerCert signs a certificate for every host (names and IP
// addresses) with a new key. It is good for both ends of a TLS connection,
// because a NATS server presents the same certificate when it dials a
// route as when it answers one.
func issueServerCert(ca *x509.Certificate, caKey crypto.Signer, hosts []string, now time.Time, valid time.Duration) (certPEM, keyPEM []byte, err error) {
	sn, err := serial()
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(valid),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		switch ip := net.ParseIP(h); {
		case h == "":
		case ip != nil:
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		default:
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	if len(tmpl.DNSNames)+len(tmpl.IPAddresses) == 0 {
		return nil, nil, errors.New("--hosts: no host name or address")
	}
	tmpl.Subject = pkix.Name{CommonName: "e31 NATS server", Organization: []string{"e31"}}
	if tmpl.NotAfter.After(ca.NotAfter) {
		// A certificate is worth nothing past its authority.
		tmpl.NotAfter = ca.NotAfter
	}
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &priv.PublicKey, caKey)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(priv)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}), nil
}

// serial is a random 128-bit certificate serial number, as RFC 5280 asks:
// unique per authority without keeping a counter.
func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
}
