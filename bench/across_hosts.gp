# bench/across_hosts.gp — time vs size across hosts: pstate, gloo, Open MPI and the wire's floor.
#
#   gnuplot -e "dir='bench/results/across_hosts/plot'; out='bench/results/across_hosts/across_hosts.png'" bench/across_hosts.gp
#
# bench/across_hosts_report.py writes dir/CASE.dat (columns: bytes, pstate, gloo, Open MPI, floor
# time in us; "NaN" where a side has no value; the floor is the UCX tag round trip, one way for
# send_recv, 2 hosts only) and dir/cases.txt (one "CASE|TITLE" line per panel), then runs this
# script. Both axes are logarithmic; lower is better.
if (!exists("dir")) dir = 'bench/results/across_hosts/plot'
if (!exists("out")) out = 'bench/results/across_hosts/across_hosts.png'

cases = system("cut -d'|' -f1 " . dir . "/cases.txt | tr '\\n' ' '")
n = words(cases)
rows = int((n + 1) / 2)

set terminal pngcairo size 1200, 360 * rows font "DejaVu Sans,10" noenhanced
set output out
set multiplot layout rows, 2 title "across hosts (network namespaces, veth, TCP): median time of the slowest rank per call, lower is better"
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
  set title title
  plot dir . "/" . c . ".dat" using 1:4 with linespoints lw 2 pt 7 ps 0.6 lc rgb "#d62728" title "Open MPI (tcp)", \
       ''                     using 1:3 with linespoints lw 2 pt 9 ps 0.6 lc rgb "#2ca02c" title "gloo (torch)", \
       ''                     using 1:2 with linespoints lw 2 pt 5 ps 0.6 lc rgb "#1f77b4" title "pstate", \
       ''                     using 1:5 with lines dt 2 lw 1 lc rgb "#7f7f7f" title "UCX tag round trip"
}
