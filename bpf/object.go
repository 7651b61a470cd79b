package bpf

import (
	"crypto/sha256"
	"encoding/hex"
)

// ObjectHash returns the SHA-256 of the BPF object this build embeds for
// its architecture (sprof_x86_bpfel.o or sprof_arm64_bpfel.o), in hex, so
// `sprof version` tells two builds with different programs apart and a
// user can compare it with `sha256sum bpf/*.o` of a checkout.
func ObjectHash() string {
	sum := sha256.Sum256(_SprofBytes)
	return hex.EncodeToString(sum[:])
}
