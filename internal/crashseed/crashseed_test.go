package crashseed

import "testing"

func TestSeed(t *testing.T) {
	if a, b := Seed(t), Seed(t); a == 0 || b == 0 {
		t.Fatalf("Seed = %d, %d; want a non-zero seed", a, b)
	}
	defer func(old uint64) { *seedFlag = old }(*seedFlag)
	*seedFlag = 1795424848761169854
	if got := Seed(t); got != 1795424848761169854 {
		t.Fatalf("Seed with -crash.seed=1795424848761169854 = %d", got)
	}
}
