# sizes.awk totals the bytes of a Go binary by package and by module from
# the symbol table that `go tool nm -size` prints (ADDRESS SIZE TYPE NAME),
# which only an unstripped binary has. build.sh sizes runs it.
#
#   go tool nm -size -sort address BINARY | awk -v top=30 -f packaging/sizes/sizes.awk
#
# What it counts: every symbol that occupies bytes of the file, once (a
# symbol at the address of another is an alias: the runtime's section
# markers runtime.text, runtime.rodata, runtime.types ... give way to the
# symbol they mark). Zero-initialised data (the range runtime.bss to
# runtime.enoptrbss, or type B) takes no bytes of the file and is left
# out. The linker's shared tables belong to no package and are totalled
# on their own lines, in parentheses: the function tables (runtime.pclntab:
# names, line numbers and stack maps of every function, about 40% of the
# size of the code), the type descriptors (type:*), the function metadata
# (go:func.*), the string data (go:string.*) and the interface tables
# (go:itab.*).
function marker(name) {
  return name ~ /^runtime\.(e?(text|rodata|types|data|noptrdata|bss|noptrbss|gcdata|gcbss)|epclntab|etypes|zerobase|end)$/
}
function hex2num(h,   i, n) {
  n = 0
  for (i = 1; i <= length(h); i++) n = n * 16 + index("0123456789abcdef", tolower(substr(h, i, 1))) - 1
  return n
}
function pkg(name,   p, i, head, tail) {
  if (name ~ /^type:/) return "(type descriptors)"
  if (name ~ /^go:string/) return "(string data)"
  if (name ~ /^go:func/) return "(function metadata)"
  if (name ~ /^go:itab/) return "(interface tables)"
  if (name ~ /^go:/) return "(compiler-generated wrappers)"
  if (name ~ /^runtime\.(pclntab|findfunctab|functab|epclntab)$/) return "(function tables)"
  p = name
  i = index(p, "["); if (i > 0) p = substr(p, 1, i - 1)   # generic instances
  i = match(p, /\/[^\/]*$/)
  if (i > 0) { head = substr(p, 1, i); tail = substr(p, i + 1) } else { head = ""; tail = p }
  i = index(tail, "."); if (i > 0) tail = substr(tail, 1, i - 1)
  p = head tail
  gsub(/%2e/, ".", p)  # the linker escapes the dots of a path's last element
  return p
}
function module(p,   parts) {
  if (p ~ /^\(/) return p
  if (p == "main") return "main (cmd/openstarry)"
  split(p, parts, "/")
  if (parts[1] == "vendor") return "std (vendored golang.org/x)"
  if (parts[1] !~ /\./) return "std"
  if (parts[1] == "github.com" || parts[1] == "golang.org") return parts[1] "/" parts[2] "/" parts[3]
  return parts[1] "/" parts[2]
}
{
  name = $4; for (i = 5; i <= NF; i++) name = name " " $i
  addr = sprintf("%16s", $1); gsub(/ /, "0", addr)  # compared as strings
  if (pending != "" && addr > pending) { size[pending] = hex2num(addr) - hex2num(pending); pending = "" }
  if (name == "runtime.bss") bss = addr
  if (name == "runtime.enoptrbss") ebss = addr
  if ($3 == "B" || $3 == "b" || $3 == "U" || $3 == "_") next  # no bytes of the file
  if (addr in best && !marker(best[addr])) next
  best[addr] = name; size[addr] = $2
  # An ELF gives the linker's tables (type:*, go:string.*,
  # runtime.pclntab) no size: each spans to the next symbol.
  if ($2 == 0 && !marker(name)) pending = addr
}
END {
  for (addr in best) {
    if (bss != "" && ebss != "" && addr >= bss && addr < ebss) continue
    p = pkg(best[addr]); P[p] += size[addr]; M[module(p)] += size[addr]; total += size[addr]
  }
  if (total == 0) { print "no symbols: the binary is stripped (build it without -s -w)" > "/dev/stderr"; exit 1 }
  if (top == "") top = 30
  printf "%-48s %10s %6s\n", "module", "KiB", "share"
  n = 0; for (m in M) keys[++n] = m
  sortdesc(keys, n, M)
  for (i = 1; i <= n; i++) printf "%-48s %10.1f %5.1f%%\n", keys[i], M[keys[i]] / 1024, 100 * M[keys[i]] / total
  printf "%-48s %10.1f\n\n", "total", total / 1024
  delete keys
  printf "%-64s %10s %6s\n", "package (the " top " largest)", "KiB", "share"
  n = 0; for (p in P) keys[++n] = p
  sortdesc(keys, n, P)
  for (i = 1; i <= n && i <= top; i++) printf "%-64s %10.1f %5.1f%%\n", keys[i], P[keys[i]] / 1024, 100 * P[keys[i]] / total
}
# sortdesc sorts k[1..n] by v[k[i]], largest first (insertion sort: a few
# hundred keys).
function sortdesc(k, n, v,   i, j, x) {
  for (i = 2; i <= n; i++) {
    x = k[i]
    for (j = i - 1; j >= 1 && (v[k[j]] < v[x] || (v[k[j]] == v[x] && k[j] > x)); j--) k[j + 1] = k[j]
    k[j + 1] = x
  }
}
