package tailbuf

import "testing"

func TestKeepsTheLastBytes(t *testing.T) {
	b := New(5)
	for _, s := range []string{"ab", "cd"} {
		if n, err := b.Write([]byte(s)); n != len(s) || err != nil {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	if b.String() != "abcd" || b.Cut() {
		t.Fatalf("under the size: %q cut=%v", b, b.Cut())
	}
	if n, _ := b.Write([]byte("efghij")); n != 6 {
		t.Fatalf("Write of more than the size wrote %d", n)
	}
	if b.String() != "fghij" || !b.Cut() {
		t.Fatalf("over the size: %q cut=%v, want \"fghij\" cut", b, b.Cut())
	}
}
