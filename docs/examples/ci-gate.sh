#!/bin/sh
# A CI job's gate on the virtualization tax, shown on this machine with no guest: a baseline
# and two candidates are measured as agent streams, each imported as one experiment, and
# compared with the baseline. `vmtax compare --fail-on slower` exits
#   0  the gate passed (no row judged slower; rows that could not be judged are named)
#   3  the gate tripped (a row is slower, or its whole CI lies above --max-overhead)
#   2  bad input (an unknown --fail-on word, a tolerance below 1)   1  a run-time failure
# The "slowed" candidate tests more primes per event (max_prime 2600 instead of 2000): a change
# that costs about half as much again, the way a new kernel or QEMU would. In a real job the candidate
# is the same command run on the new stack, and the baseline comes from the store.
set -u
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
db="sqlite:///$work/gate.db"

# Baseline and candidates take turns, one run each per round, so that what else the machine
# does meanwhile falls on all of them alike (measured one after another, a busy minute during
# one of them would read as a tax of its own).
round=1
while [ "$round" -le 8 ]; do
    for build in base:2000 same:2000 slowed:2600; do
        vmtax-probe run cpu --runs 1 --param "max_prime=${build#*:}" \
            > "$work/${build%%:*}.$round.jsonl" || exit 1
    done
    round=$((round + 1))
done
for build in base same slowed; do  # experiments 1, 2 and 3
    vmtax import "$work/$build".*.jsonl --label "build=$build" --db "$db" > /dev/null || exit 1
done

gate() {  # gate EXPERIMENT: the candidate's experiment against the baseline's (experiment 1)
    vmtax compare exp=1 "exp=$1" --baseline build=base --fail-on slower --max-overhead 1.25 \
        --format csv --db "$db" > "$work/compare.csv"
    code=$?
    echo "$2: exit $code"
}
gate 2 "A/A (the same build twice)"
gate 3 "slowed build"
vmtax compare exp=1 exp=3 --baseline build=base --fail-on slow --db "$db"
echo "unknown --fail-on word: exit $?"
vmtax compare exp=1 exp=3 --baseline build=base --max-overhead 0.9 --db "$db"
echo "tolerance below 1: exit $?"
