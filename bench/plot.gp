# bench/plot.gp — time vs size, Open MPI, pstate (and gloo), one panel per benchmark case.
#
#   gnuplot -e "dir='bench/results/plot'; out='bench/results/time_vs_size.png'" bench/plot.gp
#
# bench/report.py writes dir/CASE.dat (columns: bytes, MPI time_us, pstate time_us, gloo time_us;
# "NaN" where one side has no value) and dir/cases.txt (one "CASE|TITLE|GLOO" line per panel, in
# order; GLOO is 1 when the case has gloo numbers, and only then is its curve drawn), then runs
# this script. Both axes are logarithmic; lower is better.
if (!exists("dir")) dir = 'bench/results/plot'
if (!exists("out")) out = 'bench/results/time_vs_size.png'

cases = system("cut -d'|' -f1 " . dir . "/cases.txt | tr '\\n' ' '")
n = words(cases)
rows = int((n + 1) / 2)

set terminal pngcairo size 1200, 360 * rows font "DejaVu Sans,10" noenhanced
set output out
set multiplot layout rows, 2 title "pstate vs Open MPI (ob1/vader) and gloo (tcp, 127.0.0.1): median time of the slowest rank per call, lower is better"
set logscale xy
set grid xtics ytics mxtics mytics lc rgb "#dddddd"
set xlabel "bytes"
set ylabel "time (us)"
set xtics ("1 B" 1, "64 B" 64, "4 KiB" 4096, "64 KiB" 65536, "1 MiB" 1048576, "16 MiB" 16777216, "256 MiB" 268435456)
set key top left
set datafile missing "NaN"

do for [i = 1:n] {
  c = word(cases, i)
  title = system("grep '^" . c . "|' " . dir . "/cases.txt | cut -d'|' -f2")
  gloo = system("grep '^" . c . "|' " . dir . "/cases.txt | cut -d'|' -f3")
  set title title
  if (gloo eq "1") {
    plot dir . "/" . c . ".dat" using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb "#d62728" title "Open MPI", \
         ''                     using 1:4 with linespoints lw 2 pt 9 ps 0.6 lc rgb "#2ca02c" title "gloo", \
         ''                     using 1:3 with linespoints lw 2 pt 5 ps 0.6 lc rgb "#1f77b4" title "pstate"
  } else {
    plot dir . "/" . c . ".dat" using 1:2 with linespoints lw 2 pt 7 ps 0.6 lc rgb "#d62728" title "Open MPI", \
         ''                     using 1:3 with linespoints lw 2 pt 5 ps 0.6 lc rgb "#1f77b4" title "pstate"
  }
}
unset multiplot
