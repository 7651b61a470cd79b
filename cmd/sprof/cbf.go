package main

import (
	"bufio"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sprof/sprof/cbf"
)

const cbfUsage = `Usage:
  sprof cbf decode [--format F] [--swift] [INPUT]

Decodes stacks in the Compact Backtrace Format (CBF), the format of
sprof recordings and of Swift's backtraces, and prints their frames.

INPUT is the record itself in hex or base64, a file holding it (raw bytes,
hex or base64), or - for standard input (the default). Records laid end to
end are decoded one after another. A Swift backtrace in JSON
({"architecture", "backtrace", "imageMap"}) is accepted too; its frames
are shown with the image and file offset each belongs to.

Examples:
  sprof cbf decode 021200999900
  sprof cbf decode AhEQACAQIf8ANX//AAAQ8ERhA+gpICCAERAQiAkB
  sprof cbf decode --swift crash.json
`

func runCBF(e *env, args []string) error {
	if len(args) == 0 {
		return usagef("missing subcommand: decode")
	}
	switch args[0] {
	case "decode":
		return runCBFDecode(e, args[1:])
	case "-h", "--help", "help":
		fmt.Fprint(e.stdout, cbfUsage)
		return nil
	}
	return usagef("unknown subcommand %q: use decode", args[0])
}

func runCBFDecode(e *env, args []string) error {
	fs := newFlagSet(e, "cbf decode", cbfUsage)
	format := fs.String("format", "auto", "input `format`: auto, hex, base64, json or raw")
	swift := fs.Bool("swift", false, "decode as Swift does: never fail, end bad or cut records with a truncated frame")
	maxFrames := fs.Int("max-frames", cbf.DefaultMaxFrames, "the most frames one record may expand to")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 1 {
		return usagef("one INPUT at most, got %d", fs.NArg())
	}
	in, fromText, err := readCBFInput(e, fs.Arg(0))
	if err != nil {
		return err
	}
	kind, err := cbfInputFormat(*format, in, fromText)
	if err != nil {
		return err
	}
	// An argument that is no file must be a record itself; a path mistyped
	// must not be decoded as base64, not even by --swift, which never fails.
	notFile := func() error {
		return fmt.Errorf("%q: no such file, nor a CBF record in hex, base64 or JSON", fs.Arg(0))
	}
	d := cbf.Decoder{Swift: *swift, MaxFrames: *maxFrames}
	out := bufio.NewWriter(e.stdout)
	defer out.Flush()
	var images *cbf.ImageMap
	var data []byte
	switch kind {
	case "json":
		var bt cbf.Backtrace
		if err := bt.UnmarshalJSON(in); err != nil {
			return fmt.Errorf("read Swift backtrace JSON: %w", err)
		}
		data, _ = cbf.AppendFrames(nil, bt.WordSize, bt.Frames)
		images = bt.Images
		fmt.Fprintf(out, "architecture %s\n", bt.Architecture)
	case "hex":
		if data, err = hex.DecodeString(strings.Join(strings.Fields(string(in)), "")); err != nil {
			return fmt.Errorf("hex input: %w", err)
		}
	case "base64":
		if data, err = cbf.DecodeBase64(strings.TrimSpace(string(in))); err != nil {
			if fromText {
				return notFile()
			}
			return fmt.Errorf("base64 input: %w", err)
		}
	default:
		data = in
	}
	if fromText && kind != "json" && !startsRecord(data) {
		return notFile()
	}
	return printRecords(out, d, data, images)
}

// readCBFInput returns the bytes named by arg, and whether they came from
// the command line (and so must be text).
func readCBFInput(e *env, arg string) ([]byte, bool, error) {
	if arg == "" || arg == "-" {
		b, err := io.ReadAll(e.stdin)
		return b, false, err
	}
	if b, err := os.ReadFile(arg); err == nil {
		return b, false, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, false, err
	}
	return []byte(arg), true, nil
}

// cbfInputFormat resolves --format auto by looking at the input: JSON,
// then hex, then base64, then raw bytes (not from the command line).
func cbfInputFormat(format string, in []byte, fromText bool) (string, error) {
	switch format {
	case "hex", "base64", "json", "raw":
		return format, nil
	case "auto":
	default:
		return "", usagef("--format %q: use auto, hex, base64, json or raw", format)
	}
	text := strings.TrimSpace(string(in))
	switch {
	case strings.HasPrefix(text, "{"):
		return "json", nil
	case text != "" && strings.Trim(text, "0123456789abcdefABCDEF \t\n") == "":
		return "hex", nil
	case text != "" && strings.Trim(text, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/-_=") == "":
		return "base64", nil
	case fromText:
		return "", fmt.Errorf("%q: no such file, nor a CBF record in hex, base64 or JSON", string(in))
	}
	return "raw", nil
}

// startsRecord says whether data starts with a CBF info byte: what a
// record given on the command line does, and a file name read as base64
// almost never.
func startsRecord(data []byte) bool {
	_, _, err := cbf.Decoder{}.Decode(nil, data)
	var fe *cbf.FormatError
	return len(data) > 0 && !(errors.As(err, &fe) && fe.Offset == 0 && fe.Field == "info byte")
}

// printRecords decodes the records in data one after another and prints
// their frames, with image and file offset when images is known. A record
// the strict decoder rejects ends the input: with --swift it is shown as
// Swift shows it, otherwise the error names its offset in data.
func printRecords(w io.Writer, d cbf.Decoder, data []byte, images *cbf.ImageMap) error {
	strict := cbf.Decoder{MaxFrames: d.MaxFrames}
	var frames []cbf.Frame
	for off, rec := 0, 1; off < len(data); rec++ {
		var n int
		var err error
		frames, n, err = strict.Decode(frames[:0], data[off:])
		if err != nil && d.Swift {
			frames, _, _ = d.Decode(frames[:0], data[off:])
			fmt.Fprintf(w, "record %d: from byte %d, %d frames as Swift reads them\n", rec, off, len(frames))
			printFrames(w, frames, images)
			return nil
		}
		if err != nil {
			fmt.Fprintf(w, "record %d: from byte %d, %d frames before an error\n", rec, off, len(frames))
			printFrames(w, frames, images)
			var fe *cbf.FormatError
			if errors.As(err, &fe) {
				fe.Offset += int64(off)
			}
			return fmt.Errorf("record %d: %w", rec, err)
		}
		fmt.Fprintf(w, "record %d: bytes %d-%d, %d frames\n", rec, off, off+n, len(frames))
		printFrames(w, frames, images)
		off += n
	}
	return nil
}

func printFrames(w io.Writer, frames []cbf.Frame, images *cbf.ImageMap) {
	for i, f := range frames {
		switch f.Kind {
		case cbf.Omit:
			fmt.Fprintf(w, "      omit   %d frames\n", f.Omitted)
		case cbf.Truncated:
			fmt.Fprintf(w, "      truncated\n")
		default:
			fmt.Fprintf(w, "  #%-3d %-6s 0x%016x%s\n", i, f.Kind, f.Addr, imageOf(images, f))
		}
	}
}

// imageOf names the image and file offset of a frame, "" when unknown.
func imageOf(images *cbf.ImageMap, f cbf.Frame) string {
	if images == nil {
		return ""
	}
	i := images.Lookup(f.SymbolAddr())
	if i < 0 {
		return "  [unknown]"
	}
	im := images.Image(i)
	// The offset of the address itself, as perf and pprof show it.
	return fmt.Sprintf("  %s+0x%x", im.Name, im.FileOffset(f.Addr))
}
