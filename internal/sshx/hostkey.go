package sshx

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"golang.org/x/crypto/ssh"
)

// pinned is a parsed HostKeyPolicy.
type pinned struct {
	keys        []ssh.PublicKey
	fingerprint string
	tofu        bool
}

func parsePolicy(p HostKeyPolicy) (*pinned, error) {
	pin := &pinned{tofu: p.TrustOnFirstUse, fingerprint: strings.TrimSpace(p.Fingerprint)}
	if strings.TrimSpace(p.KnownHost) != "" {
		for i, line := range strings.Split(p.KnownHost, "\n") {
			line = strings.TrimSpace(line)
			if line == "" || strings.HasPrefix(line, "#") {
				continue
			}
			key, err := parseKnownHostLine(line)
			if err != nil {
				return nil, fmt.Errorf("line %d: %v", i+1, err)
			}
			pin.keys = append(pin.keys, key)
		}
		if len(pin.keys) == 0 {
			return nil, errors.New("no key in the known_hosts text")
		}
	}
	if pin.fingerprint != "" && !strings.HasPrefix(pin.fingerprint, "SHA256:") {
		return nil, fmt.Errorf("fingerprint %q is not a SHA256 fingerprint; get one with ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub on the machine", pin.fingerprint)
	}
	pinnedSome := len(pin.keys) > 0 || pin.fingerprint != ""
	switch {
	case pinnedSome && pin.tofu:
		return nil, errors.New("both a pinned key and trust-on-first-use are set; keep the pinned key")
	case !pinnedSome && !pin.tofu:
		return nil, errors.New("no host key decision: give a known_hosts line, a SHA256 fingerprint, or trust-on-first-use")
	}
	if pin.fingerprint != "" && len(pin.keys) > 0 && !slices.ContainsFunc(pin.keys, func(k ssh.PublicKey) bool {
		return ssh.FingerprintSHA256(k) == pin.fingerprint
	}) {
		return nil, errors.New("the fingerprint is not the fingerprint of any key in the known_hosts text")
	}
	return pin, nil
}

// parseKnownHostLine accepts "hosts type key [comment]" and "type key
// [comment]".
func parseKnownHostLine(line string) (ssh.PublicKey, error) {
	if key, _, _, _, err := ssh.ParseAuthorizedKey([]byte(line)); err == nil {
		return key, nil
	}
	marker, _, key, _, _, err := ssh.ParseKnownHosts([]byte(line))
	if err != nil {
		return nil, fmt.Errorf("not a known_hosts line (want \"host ssh-ed25519 AAAA...\"): %v", err)
	}
	if marker != "" {
		return nil, fmt.Errorf("@%s lines are not supported; give the host's own key", marker)
	}
	return key, nil
}

func (p *pinned) accepts(key ssh.PublicKey) bool {
	if p.tofu {
		return true
	}
	if p.fingerprint != "" && ssh.FingerprintSHA256(key) != p.fingerprint {
		return false
	}
	if len(p.keys) == 0 {
		return true
	}
	b := key.Marshal()
	return slices.ContainsFunc(p.keys, func(k ssh.PublicKey) bool { return bytes.Equal(k.Marshal(), b) })
}

// Host key algorithm families, in the order they are tried when only a
// fingerprint is known: ed25519 first, the key that ssh-keygen and
// OpenSSH prefer, where x/crypto by default would ask for RSA.
var algorithmFamilies = [][]string{
	{ssh.KeyAlgoED25519},
	{ssh.KeyAlgoECDSA256, ssh.KeyAlgoECDSA384, ssh.KeyAlgoECDSA521},
	{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256},
}

func algorithmsFor(keyType string) []string {
	switch keyType {
	case ssh.KeyAlgoRSA:
		return []string{ssh.KeyAlgoRSASHA512, ssh.KeyAlgoRSASHA256, ssh.KeyAlgoRSA}
	default:
		return []string{keyType}
	}
}

// algorithmSets returns the host key algorithm lists to handshake with, one
// dial each. A pinned key asks for its own type, so a server with several
// host keys presents the pinned one.
func (p *pinned) algorithmSets() [][]string {
	if len(p.keys) > 0 {
		var algos []string
		for _, k := range p.keys {
			for _, a := range algorithmsFor(k.Type()) {
				if !slices.Contains(algos, a) {
					algos = append(algos, a)
				}
			}
		}
		return [][]string{algos}
	}
	if p.tofu {
		return [][]string{slices.Concat(algorithmFamilies...)}
	}
	return algorithmFamilies
}

func (p *pinned) describe() string {
	var s []string
	for _, k := range p.keys {
		s = append(s, k.Type()+" "+ssh.FingerprintSHA256(k))
	}
	if p.fingerprint != "" && len(p.keys) == 0 {
		s = append(s, p.fingerprint)
	}
	return strings.Join(s, " or ")
}
