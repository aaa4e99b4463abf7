package cli

import (
	"bytes"
	"errors"
	"net/netip"
	"os"

	"github.com/tbrdma/tbrdma/rdmacm"
	"github.com/tbrdma/tbrdma/verbs"
)

// pskEnv names the key file when --psk-file is not given.
const pskEnv = "TBRDMA_PSK_FILE"

// loadPSK reads the pre-shared key of --psk-file (or $TBRDMA_PSK_FILE):
// the file's bytes less a trailing newline. It refuses a missing file, an
// empty or short key, and, as ssh does with private keys, a file that
// group or others may read or write. path "" means no key (nil). Errors
// are usage errors (*FlagError).
func loadPSK(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, FlagErrorf("--psk-file: %v (create it with: head -c 32 /dev/urandom | base64 > %s; chmod 600 %s)", err, path, path)
	}
	if !fi.Mode().IsRegular() {
		return nil, FlagErrorf("--psk-file %s: not a regular file: give the file that holds the key", path)
	}
	if perm := fi.Mode().Perm(); perm&0o077 != 0 {
		return nil, FlagErrorf("--psk-file %s: other users may read or change the key (mode %v): run chmod 600 %s", path, perm, path)
	}
	key, err := os.ReadFile(path)
	if err != nil {
		return nil, FlagErrorf("--psk-file: %v", err)
	}
	key = bytes.TrimSuffix(key, []byte("\n"))
	key = bytes.TrimSuffix(key, []byte("\r"))
	if len(key) < rdmacm.MinPSKLen {
		return nil, FlagErrorf("--psk-file %s: the key has %d bytes, at least %d are needed: put a random secret in it (head -c 32 /dev/urandom | base64 > %s)", path, len(key), rdmacm.MinPSKLen, path)
	}
	return key, nil
}

// withPSK makes f.OpenDevice give every device it opens the key for its
// rdma_cm connection setup (rdmacm.SetDevicePSK): ping (rping), udaddy
// (SIDR), perftest -R and cat pick it up without further plumbing.
func withPSK(f *Factory, key []byte) {
	f.PSK = true
	open := f.OpenDevice
	f.OpenDevice = func(addr netip.Addr) (*verbs.Context, error) {
		v, err := open(addr)
		if err != nil {
			return nil, err
		}
		if err := rdmacm.SetDevicePSK(v, key); err != nil {
			v.Close()
			return nil, err
		}
		return v, nil
	}
}

// pskHint names the flag behind a failed key check (rdmacm.ErrAuthFailed,
// whose text ends the message): the library says what is wrong, the CLI
// says which flag sets the key.
func pskHint(err error) string {
	if errors.Is(err, rdmacm.ErrAuthFailed) {
		return " (--psk-file)"
	}
	return ""
}
