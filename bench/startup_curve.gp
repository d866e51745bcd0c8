# bench/startup_curve.gp — start-up wall time against the number of ranks: pstate (and pstate
# before a start-up change) vs Open MPI.
#
#   gnuplot -e "dat='bench/results/plot/startup_curve.dat'; out='bench/results/startup_curve.png'; mpi=1; pstate=1; before=0" bench/startup_curve.gp
#
# bench/report.py writes dat from bench/startup_curve.sh's JSON (columns: ranks, Open MPI ms,
# pstate ms, pstate-before ms; "NaN" where a value is missing), then runs this script; mpi, pstate
# and before say which curves have values to draw (1) or none (0). Both axes are logarithmic
# (ranks by powers of 2): the ranks double from size to size, and the times span decades. Lower
# is better.
if (!exists("dat")) dat = 'bench/results/plot/startup_curve.dat'
if (!exists("out")) out = 'bench/results/startup_curve.png'
if (!exists("mpi")) mpi = 1
if (!exists("pstate")) pstate = 1
if (!exists("before")) before = 0

set terminal pngcairo size 900, 560 font "DejaVu Sans,10" noenhanced
set output out
set title "Start-up to model parallel and finalize, whole processes: median wall time, lower is better"
set logscale x 2
set logscale y
set grid xtics ytics mytics lc rgb "#dddddd"
set xlabel "ranks (oversubscribed on this machine's cores)"
set ylabel "wall time (ms)"
set key top left
set datafile missing "NaN"

# One plot command of the curves that have values (gnuplot stops at a curve with no valid point).
curves = ""
if (mpi) {
  curves = curves . ", dat using 1:2 with linespoints lw 2 pt 7 ps 0.8 lc rgb '#d62728' title 'Open MPI (MPI_Init, MPI_Barrier, MPI_Finalize)'"
}
if (before) {
  curves = curves . ", dat using 1:4 with linespoints lw 2 dt 2 pt 4 ps 0.8 lc rgb '#7f9fbf' title 'pstate, before'"
}
if (pstate) {
  curves = curves . ", dat using 1:3 with linespoints lw 2 pt 5 ps 0.8 lc rgb '#1f77b4' title 'pstate (pstate_init, model parallel, finalize)'"
}
eval "plot " . curves[3:]
