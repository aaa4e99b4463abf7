// Command rping is rping over tbrdma, for interop checks against a stock
// rping on rdma_rxe:
//
//	rping -s -a ADDR [-p PORT] [-C N] [-v] [-S SIZE] [-ready FILE]
//	rping -c -a SERVER -I ADDR [-p PORT] [-C N] [-v] [-S SIZE]
//
// It opens a verbs context on the local address (-a for the server, -I for
// the client).
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"time"

	"github.com/tbrdma/tbrdma/rdmacm/internal/rpingtest"
	"github.com/tbrdma/tbrdma/verbs"
)

func main() {
	server := flag.Bool("s", false, "server")
	client := flag.Bool("c", false, "client")
	addr := flag.String("a", "", "server: bind address; client: server address")
	src := flag.String("I", "", "client: source address")
	port := flag.Uint("p", 7174, "port")
	count := flag.Int("C", 10, "iterations")
	size := flag.Int("S", 64, "ping buffer size")
	verbose := flag.Bool("v", false, "print ping data")
	readyFile := flag.String("ready", "", "server: create this file once listening")
	timeout := flag.Duration("t", 120*time.Second, "give up after")
	flag.Parse()
	if *server == *client || *addr == "" || (*client && *src == "") {
		flag.Usage()
		os.Exit(2)
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt)
	defer cancel()
	ctx, cancel2 := context.WithTimeout(ctx, *timeout)
	defer cancel2()
	a := netip.MustParseAddr(*addr)
	local := a
	if *client {
		local = netip.MustParseAddr(*src)
	}
	vctx, err := verbs.NewContext(&verbs.Options{Addr: local})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer vctx.Close()
	o := rpingtest.Options{Port: uint16(*port), Size: *size, Count: *count, Verbose: *verbose, Out: os.Stdout}
	if *server {
		err = rpingtest.Server(ctx, vctx, a, o, func() {
			if *readyFile != "" {
				os.WriteFile(*readyFile, nil, 0o644)
			}
		})
		fmt.Fprintln(os.Stderr, "server DISCONNECT EVENT...")
	} else {
		err = rpingtest.Client(ctx, vctx, a, o)
		fmt.Fprintln(os.Stderr, "client DISCONNECT EVENT...")
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "rping:", err)
		os.Exit(1)
	}
}
