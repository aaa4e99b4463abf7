// Package cli implements the tbrdma command line: the root command, one
// file per subcommand, and the exit codes of exit.go.
//
// To add a command, write xxx.go with
//
//	type xxxOptions struct{ ... }
//	func newCmdXxx(f *Factory, runF func(*xxxOptions) error) *cobra.Command
//	func runXxx(ctx context.Context, opts *xxxOptions) error
//
// and add one line to the commands list below. newCmdXxx parses flags into
// the options, returns a *FlagError for bad usage, and calls runF (tests
// pass one to capture the options) or runXxx.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	rdebug "runtime/debug"
	"strings"
	"syscall"

	"github.com/spf13/cobra"
)

// commands are the subcommands of tbrdma, one constructor each.
var commands = []func(*Factory) *cobra.Command{
	func(f *Factory) *cobra.Command { return newCmdPingpong(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdReadLat(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdAtomicLat(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdWriteBW(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdReadBW(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdSendBW(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdWriteLat(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdSendLat(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdDemo(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdServe(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdPing(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdUdaddy(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdDevices(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdCat(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdPeers(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdVersion(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdCompletion(f, nil) },
	func(f *Factory) *cobra.Command { return newCmdExec(f, nil) },
}

// Main runs tbrdma with the process's arguments and returns its exit code.
func Main() int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx, NewFactory(), os.Args[1:])
}

// run executes args and returns the exit code.
func run(ctx context.Context, f *Factory, args []string) int {
	root := newRootCmd(f)
	defer live.flush() // remove this process's counter file if its devices are closed (livecounters.go)
	root.SetArgs(args)
	cmd, err := root.ExecuteContextC(ctx)
	if err == nil {
		return ExitOK
	}
	if cmd == nil {
		cmd = root
	}
	// Cobra's own usage errors: an unknown command, and the argument-count
	// checks of its built-in commands (e.g. the hidden "__complete" that
	// shell completion scripts call, found by FuzzCLIArgs).
	if msg := err.Error(); strings.HasPrefix(msg, "unknown command") ||
		strings.HasPrefix(cmd.Name(), "__complete") ||
		strings.HasPrefix(msg, "requires at least ") || strings.HasPrefix(msg, "accepts at most ") {
		err = &FlagError{Err: err}
	}
	code := exitCode(err, ctx.Err() != nil)
	switch {
	case code == ExitUsage:
		printUsageError(f.IO.ErrOut, cmd, err)
	case code == ExitInterrupted:
		fmt.Fprintln(f.IO.ErrOut, "tbrdma: interrupted")
	case errors.Is(err, errSilent):
	default:
		fmt.Fprintf(f.IO.ErrOut, "tbrdma: %v%s%s\n", err, pskHint(err), exchangeTimeoutHint(err))
	}
	return code
}

func newRootCmd(f *Factory) *cobra.Command {
	var debug, noColor bool
	var pskFile, faultFlag string
	root := &cobra.Command{
		Use:   "tbrdma <command> [flags]",
		Short: "RDMA over a Thunderbolt (or any IP) link, in user space",
		Long: `tbrdma is a user-space RDMA stack speaking RoCEv2 (UDP 4791) like Linux
SoftRoCE (rdma_rxe). Its test commands pair with the stock tools on a Linux
peer: "tbrdma pingpong" with ibv_rc_pingpong, "tbrdma read-lat" with
ib_read_lat, and so on.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			if noColor {
				f.IO.SetNoColor(true)
			}
			if debug {
				f.Logger = slog.New(slog.NewTextHandler(f.IO.ErrOut, &slog.HandlerOptions{Level: slog.LevelDebug}))
			}
			if pskFile == "" {
				pskFile = os.Getenv(pskEnv)
			}
			key, err := loadPSK(pskFile)
			if err != nil {
				return err
			}
			if key != nil {
				withPSK(f, key)
			}
			if spec := faultFromFlagOrEnv(faultFlag); spec != "" {
				fs, err := parseFault(spec)
				if err != nil {
					return &FlagError{Err: err}
				}
				withFault(f, fs)
			}
			return nil
		},
	}
	// tbrdma --version prints what "tbrdma version" prints.
	root.Version = buildVersion(rdebug.ReadBuildInfo).text()
	root.SetVersionTemplate("{{.Version}}")
	root.Flags().BoolP("version", "v", false, `print tbrdma's version (as "tbrdma version")`)
	root.SetOut(f.IO.Out)
	root.SetErr(f.IO.ErrOut)
	root.SetIn(f.IO.In)
	root.PersistentFlags().BoolVar(&debug, "debug", false, "log the RDMA engine's debug messages to stderr")
	root.PersistentFlags().StringVar(&pskFile, "psk-file", "", "authenticate rdma_cm connection setup (ping, udaddy, perftest -R, cat) with the pre-shared key in `FILE` (at least 16 bytes, the same on both ends; default $"+pskEnv+")")
	root.PersistentFlags().StringVar(&faultFlag, "fault", "", "test mode: inject seeded faults described by `SPEC` into this process's RoCE traffic, e.g. loss=1%,dup=0.5%,corrupt=0.1%,reorder=1%,delay=1ms,seed=7 (default $"+faultEnv+"; keys: loss dup corrupt reorder reorder-after reorder-delay delay jitter burst=P/R/LOSS seed)")
	root.PersistentFlags().BoolVar(&noColor, "no-color", false, "no color or styles in human output (as NO_COLOR=1; output that is not a terminal is never styled)")
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &FlagError{Err: err} })
	root.CompletionOptions.HiddenDefaultCmd = true
	for _, c := range commands {
		root.AddCommand(c(f))
	}
	return root
}

// maxArgs is cobra.MaximumNArgs returning a FlagError.
func maxArgs(n int) cobra.PositionalArgs {
	return func(_ *cobra.Command, args []string) error {
		if len(args) > n {
			return FlagErrorf("too many arguments: %q (at most %d)", args, n)
		}
		return nil
	}
}
