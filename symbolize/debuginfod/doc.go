// Package debuginfod fetches separate debug files by build ID from
// debuginfod servers (the protocol of elfutils' debuginfod, served by
// Debian, Fedora, Ubuntu and Arch for their packages).
//
// Production hosts rarely have debug packages installed, so a profile of
// their stripped binaries shows function names at best. When the
// DEBUGINFOD_URLS environment variable names servers, sprof asks them for
// the debug files it does not find on disk, once per build ID: answers are
// kept in a directory laid out as a global debug directory
// (DIR/.build-id/xx/rest.debug), so the ELF symbolizer and the GSYM
// converter find them with the same search as installed debug packages
// (see symbolize/debugfile). A build ID no server knows is remembered for
// a while, so a host with many such binaries does not ask again on every
// run. Servers are untrusted: every request has a timeout, every answer a
// size cap, and a file is kept only if it carries the build ID asked for.
package debuginfod
