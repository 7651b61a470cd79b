package cbf

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
)

// Backtrace is a stack with the image map of its process, as Swift's
// Backtrace encodes to JSON: {"architecture":"x86_64","backtrace":<base64
// CBF>,"imageMap":<base64 CIF>}, the map present only when it has images.
type Backtrace struct {
	Architecture string
	WordSize     WordSize
	Frames       []Frame
	// Images is nil when the map is unknown.
	Images *ImageMap
}

type backtraceJSON struct {
	Architecture string `json:"architecture"`
	Backtrace    string `json:"backtrace"`
	ImageMap     string `json:"imageMap,omitempty"`
}

// MarshalJSON writes the Swift form, with base64 unpadded as Swift's is.
func (b *Backtrace) MarshalJSON() ([]byte, error) {
	rec, err := AppendFrames(nil, b.WordSize, b.Frames)
	if err != nil {
		return nil, err
	}
	j := backtraceJSON{Architecture: b.Architecture, Backtrace: base64.RawStdEncoding.EncodeToString(rec)}
	if b.Images != nil && b.Images.Len() > 0 {
		j.ImageMap = base64.RawStdEncoding.EncodeToString(b.Images.AppendCIF(nil))
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads the Swift form. The stack is decoded as Swift
// decodes it (Decoder.Swift), since Swift 6.2 writes records without an
// end byte; the image map strictly.
func (b *Backtrace) UnmarshalJSON(data []byte) error {
	var j backtraceJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	rec, err := DecodeBase64(j.Backtrace)
	if err != nil {
		return fmt.Errorf("backtrace: %w", err)
	}
	*b = Backtrace{Architecture: j.Architecture}
	if len(rec) > 0 {
		b.WordSize, _ = parseInfo(rec[0])
	}
	b.Frames, _, _ = Decoder{Swift: true}.Decode(nil, rec)
	if j.ImageMap == "" {
		return nil
	}
	cif, err := DecodeBase64(j.ImageMap)
	if err != nil {
		return fmt.Errorf("imageMap: %w", err)
	}
	if b.Images, _, err = DecodeImageMap(cif); err != nil {
		return fmt.Errorf("imageMap: %w", err)
	}
	return nil
}

// DecodeBase64 decodes base64 the way Swift's runtime does: padding is
// optional and ends the data, the URL alphabet's - and _ are accepted, and
// decoding stops quietly at the first character outside the alphabet.
func DecodeBase64(s string) ([]byte, error) {
	if i := strings.IndexFunc(s, func(r rune) bool { return !isBase64(r) }); i >= 0 {
		s = s[:i]
	}
	s = strings.NewReplacer("-", "+", "_", "/").Replace(s)
	if len(s)%4 == 1 { // six bits that make no byte
		s = s[:len(s)-1]
	}
	return base64.RawStdEncoding.DecodeString(s)
}

func isBase64(r rune) bool {
	return 'A' <= r && r <= 'Z' || 'a' <= r && r <= 'z' || '0' <= r && r <= '9' || strings.ContainsRune("+/-_", r)
}
