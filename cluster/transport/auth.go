package transport

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
)

// nonceLen is the length of each side's handshake nonce.
const nonceLen = 32

// dataKey derives the data plane's key from the cluster's gossip key, so
// that the gossip key itself signs nothing here.
func dataKey(gossip []byte) []byte {
	return mac(gossip, []byte("batchd data plane v1"))
}

func mac(key []byte, parts ...[]byte) []byte {
	h := hmac.New(sha256.New, key)
	for _, p := range parts {
		// Length-prefixed, so that no two part lists hash alike.
		var n [4]byte
		binary.BigEndian.PutUint32(n[:], uint32(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	return h.Sum(nil)
}

// proof is what side ("client", "server" or "session") proves, or derives,
// of one stream's handshake: both nonces and both names, so a proof is
// good for one stream only.
func proof(key []byte, side string, clientNonce, serverNonce []byte, client, server string) []byte {
	return mac(key, []byte(side), clientNonce, serverNonce, []byte(client), []byte(server))
}

// frameMAC binds a Data frame to its session and its place in the stream.
func frameMAC(session []byte, seq uint64, payload []byte) []byte {
	var s [8]byte
	binary.BigEndian.PutUint64(s[:], seq)
	return mac(session, s[:], payload)
}

func nonce() ([]byte, error) {
	b := make([]byte, nonceLen)
	if _, err := rand.Read(b); err != nil {
		return nil, fmt.Errorf("transport: nonce: %w", err)
	}
	return b, nil
}

// TLSFiles turn TLS on: the node's certificate and key (PEM), and the CA
// that signed every node's (PEM). With a CA the server asks for and
// checks the client's certificate too (mutual TLS).
type TLSFiles struct {
	CertFile, KeyFile, CAFile string
	// ServerName is the name a client checks in the server's certificate;
	// empty: the host of the address it dials.
	ServerName string
}

func credentialsFor(f *TLSFiles) (server, client credentials.TransportCredentials, err error) {
	if f == nil {
		return insecure.NewCredentials(), insecure.NewCredentials(), nil
	}
	cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
	if err != nil {
		return nil, nil, fmt.Errorf("transport: tls: %w", err)
	}
	srv := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13}
	cli := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13, ServerName: f.ServerName}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("transport: tls: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, errors.New("transport: tls: no certificate in the CA file")
		}
		srv.ClientCAs, srv.ClientAuth = pool, tls.RequireAndVerifyClientCert
		cli.RootCAs = pool
	}
	return credentials.NewTLS(srv), credentials.NewTLS(cli), nil
}
