package cli

import (
	"context"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// fuzzArgSep separates the arguments in a FuzzCLIArgs input: a NUL, the
// one byte no real argument can hold.
const fuzzArgSep = "\x00"

// hookedCommands are the commands of root.go with a run hook that does
// nothing: flags, arguments and their checks are what is fuzzed, and no
// command opens a device, a socket or a browse.
var hookedCommands = []func(*Factory) *cobra.Command{
	func(f *Factory) *cobra.Command { return newCmdPingpong(f, nop[pingpongOptions]) },
	func(f *Factory) *cobra.Command { return newCmdReadLat(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdAtomicLat(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdWriteBW(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdReadBW(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdSendBW(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdWriteLat(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdSendLat(f, nop[perftestOptions]) },
	func(f *Factory) *cobra.Command { return newCmdDemo(f, nop[demoOptions]) },
	func(f *Factory) *cobra.Command { return newCmdServe(f, nop[serveOptions]) },
	func(f *Factory) *cobra.Command { return newCmdPing(f, nop[pingOptions]) },
	func(f *Factory) *cobra.Command { return newCmdUdaddy(f, nop[udaddyOptions]) },
	func(f *Factory) *cobra.Command { return newCmdDevices(f, nop[devicesOptions]) },
	func(f *Factory) *cobra.Command { return newCmdCat(f, nop[catOptions]) },
	func(f *Factory) *cobra.Command { return newCmdPeers(f, nop[peersOptions]) },
	func(f *Factory) *cobra.Command { return newCmdVersion(f, nop[versionOptions]) },
	func(f *Factory) *cobra.Command { return newCmdCompletion(f, nop[completionOptions]) },
	func(f *Factory) *cobra.Command { return newCmdExec(f, nop[execOptions]) },
}

// nop is a run hook that does nothing.
func nop[T any](*T) error { return nil }

// commandNames lists the subcommands newRootCmd builds from cmds.
func commandNames(cmds []func(*Factory) *cobra.Command) []string {
	f, _, _ := testFactory()
	var names []string
	for _, c := range cmds {
		names = append(names, c(f).Name())
	}
	slices.Sort(names)
	return names
}

// FuzzCLIArgs runs the root command on random argument vectors (the input
// split at NULs) with every command's run hook set, so only parsing and
// the checks in front of each command run. Properties: nothing panics; the
// exit code is 0 or ExitUsage (with the hooks no command can fail any
// other way); a usage error is reported on stderr as "tbrdma: …" with the
// command's usage, and a success writes nothing there (but the directive
// of cobra's __complete).
func FuzzCLIArgs(f *testing.F) {
	if got, want := commandNames(hookedCommands), commandNames(commands); !slices.Equal(got, want) {
		f.Fatalf("FuzzCLIArgs hooks commands %v but root.go has %v: add the new command to hookedCommands", got, want)
	}
	saved := commands
	commands = hookedCommands
	f.Cleanup(func() { commands = saved })

	for _, s := range cliSeeds {
		f.Add(strings.Join(s, fuzzArgSep))
	}
	f.Fuzz(func(t *testing.T, s string) {
		args := strings.Split(s, fuzzArgSep)
		if len(args) > 64 {
			t.Skip("more than 64 arguments")
		}
		for _, a := range args {
			// peers --static-file opens and reads the file it names: a
			// device or a FIFO could block the fuzzer forever.
			for _, p := range []string{a, a[strings.IndexByte(a, '=')+1:]} {
				if fi, err := os.Stat(p); err == nil && !fi.Mode().IsRegular() && !fi.IsDir() {
					t.Skipf("argument %q names a special file", a)
				}
			}
		}
		fac, out, errOut := testFactory()
		code := run(context.Background(), fac, args)
		switch code {
		case ExitOK:
			// cobra's hidden completion command reports its directive
			// on stderr.
			if errOut.Len() != 0 && !strings.HasPrefix(errOut.String(), "Completion ended with directive:") {
				t.Fatalf("%q: exit 0 with stderr %q", args, errOut)
			}
		case ExitUsage:
			e := errOut.String()
			if !strings.HasPrefix(e, "tbrdma: ") || !strings.Contains(e, "Usage:") {
				t.Fatalf("%q: exit %d with stderr %q, want \"tbrdma: <what is wrong>\" and the usage", args, code, e)
			}
		default:
			t.Fatalf("%q: exit %d, want 0 or %d (run hooks cannot fail); stdout %q stderr %q", args, code, ExitUsage, out, errOut)
		}
	})
}

// cliSeeds are command lines from docs/cli.md and the tests, and some
// near misses.
var cliSeeds = [][]string{
	{},
	{"--help"},
	{"help", "pingpong"},
	{"frobnicate"},
	{"pingpong", "-s", "4096", "-n", "1000", "198.18.0.2"},
	{"pingpong", "--ud", "-g", "1", "198.18.0.2"},
	{"pingpong", "--ud", "-m", "1024"},
	{"pingpong", "-m", "1000"},
	{"pingpong", "a", "b"},
	{"pingpong", "--nope"},
	{"pingpong", "-p", "1", "--bind", "127.0.0.1", "127.0.0.1"},
	{"read-lat", "-c", "UD"},
	{"read-lat", "-s", "65536", "-n", "100", "--bind", "198.18.0.1"},
	{"atomic-lat", "-s", "16", "x"},
	{"atomic-lat", "-A", "CMP_AND_SWAP", "198.18.0.2"},
	{"write-bw", "-R", "--bind", "198.18.0.1", "-n", "20", "-s", "65536"},
	{"write-bw", "-a", "-F", "--report_gbits", "198.18.0.2"},
	{"write-bw", "-c", "UC", "-q", "4", "--tx-depth=128"},
	{"read-bw", "-o", "16", "198.18.0.2"},
	{"send-bw", "-c", "UD", "-s", "1024"},
	{"send-lat", "-s", "2", "-n", "100000"},
	{"write-lat", "-I", "64", "198.18.0.2"},
	{"demo", "--addr-a", "127.0.0.1", "--addr-b", "127.0.0.2"},
	{"demo", "--addr-a", "198.18.0.1"},
	{"serve", "--bind", "198.18.0.1", "-p", "7174", "-v", "--max-conns", "0"},
	{"serve", "--no-advertise", "--iface", "thunderbolt0", "--oob-port", "70000"},
	{"ping", "-c", "3", "-i", "0.2", "--bind", "127.81.0.2", "127.81.0.1"},
	{"ping", "-s", "0", "-W", "-1", "peer"},
	{"ping", "--static", "mac=198.18.0.2:7174", "mac"},
	{"udaddy", "-b", "198.18.0.2", "-s", "198.18.0.1"},
	{"udaddy", "-s", "a", "b"},
	{"devices", "-v", "--all", "--json"},
	{"devices", "extra"},
	{"cat", "-p", "7175", "--bind", "198.18.0.1", "-W", "5", "198.18.0.2"},
	{"peers", "--watch", "--timeout", "2s"},
	{"peers", "--timeout", "0s"},
	{"peers", "--peer", "a=198.18.0.2", "--static", "b=[fe80::1%thunderbolt0]:7174,c=1.2.3.4", "--json"},
	{"peers", "--static-file", "/nonexistent/peers.txt"},
	{"peers", "--iface", " "},
	{"version", "--json"},
	{"completion", "bash"},
	{"completion", "powershell"},
	{"__complete", "pingpong", "--"},
	{"--debug", "--no-color", "version"},
	{"exec"},
	{"exec", "--print-libdir", "ib_write_bw"},
	{"exec", "--", "ib_write_bw", "-x", "1", "--help", "198.18.0.1"},
}
