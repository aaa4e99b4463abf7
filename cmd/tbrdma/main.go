// Command tbrdma is the tbrdma command-line tool: RDMA tests and tools over
// a user-space RoCEv2 stack. See `tbrdma --help`.
package main

import (
	"os"

	"github.com/tbrdma/tbrdma/cmd/tbrdma/internal/cli"
)

func main() {
	os.Exit(cli.Main())
}
