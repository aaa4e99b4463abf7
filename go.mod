module github.com/tbrdma/tbrdma

go 1.26.0

require (
	github.com/hashicorp/mdns v1.0.7
	github.com/miekg/dns v1.1.72
	github.com/spf13/cobra v1.10.2
	golang.org/x/net v0.62.0
	golang.org/x/sys v0.50.0
)

require (
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/spf13/pflag v1.0.9 // indirect
	golang.org/x/mod v0.31.0 // indirect
	golang.org/x/sync v0.19.0 // indirect
	golang.org/x/tools v0.40.0 // indirect
)
