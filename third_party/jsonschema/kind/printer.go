package kind

import (
	"fmt"
	"io"
	"strconv"
)

// Modified for OpenStarry Edge: upstream v6.0.3 formats messages with a
// *golang.org/x/text/message.Printer, which links x/text's language and
// number tables (about 250 KB) into every program that uses the package.
// Printer is what the messages need of it; *message.Printer still satisfies
// it, and English is the printer the package uses by default.

// Printer formats a message.
type Printer interface {
	Sprintf(format string, a ...any) string
}

// English formats as message.NewPrinter(language.English) does for the
// package's messages: integers with a comma every three digits (65,536).
var English Printer = englishPrinter{}

type englishPrinter struct{}

func (englishPrinter) Sprintf(format string, a ...any) string {
	args := make([]any, len(a))
	for i, x := range a {
		switch x := x.(type) {
		case int:
			args[i] = groupedInt(x)
		case int64:
			args[i] = groupedInt(x)
		case int32:
			args[i] = groupedInt(x)
		case uint32:
			args[i] = groupedInt(x)
		default:
			args[i] = x
		}
	}
	return fmt.Sprintf(format, args...)
}

// groupedInt prints in decimal with a comma every three digits for %d and
// %v, as fmt does for any other verb.
type groupedInt int64

func (n groupedInt) Format(f fmt.State, verb rune) {
	if verb != 'd' && verb != 'v' {
		fmt.Fprintf(f, fmt.FormatString(f, verb), int64(n))
		return
	}
	s := strconv.FormatInt(int64(n), 10)
	sign := ""
	if s[0] == '-' {
		sign, s = "-", s[1:]
	}
	out := make([]byte, 0, len(sign)+len(s)+len(s)/3)
	out = append(out, sign...)
	for i := 0; i < len(s); i++ {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	_, _ = io.WriteString(f, string(out))
}
