// Package e2e holds the end-to-end tests of the tbrdma command: the real
// binary, built once per run, on two network namespaces joined by a veth
// pair whose ends are both named thunderbolt0 (MTU 65520, 198.18.7.0/29),
// the way two machines on a Thunderbolt cable see each other; and golden
// files of the commands' renderings (pipe, terminal through a pseudo-
// terminal, JSON, CSV) with the timing figures masked.
//
// The tests need root and ip(8) with netns support (Linux); elsewhere they
// skip and say why. Regenerate the golden files with
//
//	go test ./cmd/tbrdma/e2e -run Golden -update
//
// The package has no code of its own: everything is in the _test files.
package e2e
