package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/ui"
)

type versionOptions struct {
	IO *ui.IO
	// BuildInfo reads the binary's build information (runtime/debug).
	BuildInfo func() (*debug.BuildInfo, bool)

	JSON bool
}

func newCmdVersion(f *Factory, runF func(*versionOptions) error) *cobra.Command {
	opts := &versionOptions{IO: f.IO, BuildInfo: debug.ReadBuildInfo}
	cmd := &cobra.Command{
		Use:   "version [--json]",
		Short: "Print tbrdma's version, the Go version and the platform",
		Long: `Print the module version tbrdma was built from ("(devel)" for a build
from a working tree), the VCS revision when the build recorded one, the Go
version and GOOS/GOARCH. This version is also what "tbrdma serve" advertises
in the mDNS TXT key "ver".`,
		Example: "  tbrdma version\n  tbrdma version --json",
		Args:    maxArgs(0),
		RunE: func(*cobra.Command, []string) error {
			if runF != nil {
				return runF(opts)
			}
			return runVersion(opts)
		},
	}
	cmd.Flags().BoolVar(&opts.JSON, "json", false, "one JSON object (schemaVersion 1)")
	return cmd
}

// versionJSON is the --json object of "tbrdma version" (schemaVersion 1).
type versionJSON struct {
	SchemaVersion int    `json:"schemaVersion"`
	Version       string `json:"version"`
	Commit        string `json:"commit,omitempty"`
	Modified      bool   `json:"modified,omitempty"`
	GoVersion     string `json:"go_version"`
	OS            string `json:"os"`
	Arch          string `json:"arch"`
}

// buildVersion returns what the build information says about this binary.
func buildVersion(read func() (*debug.BuildInfo, bool)) versionJSON {
	v := versionJSON{SchemaVersion: 1, Version: "(devel)", GoVersion: runtime.Version(), OS: runtime.GOOS, Arch: runtime.GOARCH}
	bi, ok := read()
	if !ok {
		return v
	}
	if bi.Main.Version != "" {
		v.Version = bi.Main.Version
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// moduleVersion is the version tbrdma advertises (TXT "ver").
func moduleVersion() string { return buildVersion(debug.ReadBuildInfo).Version }

func runVersion(o *versionOptions) error {
	v := buildVersion(o.BuildInfo)
	if o.JSON {
		return json.NewEncoder(o.IO.Out).Encode(v)
	}
	_, err := io.WriteString(o.IO.Out, v.text())
	return err
}

// text is what "tbrdma version" and "tbrdma --version" print.
func (v versionJSON) text() string {
	s := "tbrdma " + v.Version
	if v.Commit != "" {
		c := v.Commit
		if len(c) > 12 {
			c = c[:12]
		}
		if v.Modified {
			c += "+dirty"
		}
		s += " (" + c + ")"
	}
	return s + fmt.Sprintf("\n%s %s/%s\n", v.GoVersion, v.OS, v.Arch)
}
