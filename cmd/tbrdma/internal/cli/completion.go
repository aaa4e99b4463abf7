package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

type completionOptions struct {
	Out   io.Writer
	Shell string
	// Root is the command tree the script completes.
	Root *cobra.Command
}

var completionShells = []string{"bash", "zsh", "fish"}

func newCmdCompletion(f *Factory, runF func(*completionOptions) error) *cobra.Command {
	opts := &completionOptions{Out: f.IO.Out}
	cmd := &cobra.Command{
		Use:   "completion bash|zsh|fish",
		Short: "Print a shell completion script",
		Long: `Print the completion script for bash, zsh or fish on stdout (cobra's
generators). Peer arguments (ping, pingpong, the perftest commands, cat,
udaddy) complete to the names and addresses of the --static peers on the
command line and of those a 1 s mDNS browse finds, not to file names. Load
it for the current shell, or install it:

  bash:  source <(tbrdma completion bash)
         tbrdma completion bash > /etc/bash_completion.d/tbrdma
  zsh:   tbrdma completion zsh > "${fpath[1]}/_tbrdma"   # compinit must be on
  fish:  tbrdma completion fish > ~/.config/fish/completions/tbrdma.fish`,
		ValidArgs: completionShells,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) != 1 {
				return FlagErrorf("completion needs one shell (bash, zsh or fish), got %d arguments", len(args))
			}
			return nil
		},
		RunE: func(c *cobra.Command, args []string) error {
			opts.Shell, opts.Root = args[0], c.Root()
			switch opts.Shell {
			case "bash", "zsh", "fish":
			default:
				return FlagErrorf("unknown shell %q: want bash, zsh or fish", opts.Shell)
			}
			if runF != nil {
				return runF(opts)
			}
			return runCompletion(opts)
		},
	}
	return cmd
}

func runCompletion(o *completionOptions) error {
	var err error
	switch o.Shell {
	case "bash":
		err = o.Root.GenBashCompletionV2(o.Out, true)
	case "zsh":
		err = o.Root.GenZshCompletion(o.Out)
	case "fish":
		err = o.Root.GenFishCompletion(o.Out, true)
	}
	if err != nil {
		return fmt.Errorf("completion %s: %w", o.Shell, err)
	}
	return nil
}
