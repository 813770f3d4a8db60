# The centre's shell commands in a site dry-run job (tests/site_dry_run.py), as recording stand-ins.
# The test hands this file to the job as BASH_ENV, so every non-interactive bash of the job defines
# them: at the centres `module` (and conda's and JSC's `jutil` helpers) are shell functions too.
# Each call appends one line to $DRYRUN_CALLS: command TAB arguments TAB $VIRTUAL_ENV at the call
# (empty: no environment activated yet). Nothing here is exported to the ranks.

_dryrun_record() {
  local IFS=' '
  printf '%s\t%s\t%s\n' "$1" "${*:2}" "${VIRTUAL_ENV:-}" >> "${DRYRUN_CALLS:?this job has no DRYRUN_CALLS file}"
}

# `module load X` puts X's library folder in front of LD_LIBRARY_PATH, as a centre's module does,
# so that the tier sees whether the modules' setting reaches every rank.
module() {
  _dryrun_record module "$@"
  if [ "${1:-}" = load ]; then
    shift
    local name
    for name in "$@"; do
      export LD_LIBRARY_PATH="$DRYRUN_SITE_ROOT/modules/${name//\//_}/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    done
  fi
}

conda() {
  _dryrun_record conda "$@"
}

# JSC: `jutil env activate -p <project>` sets $PROJECT and $SCRATCH to the project's folders
# (/p/project1/<project>, /p/scratch/<project>; here under the site's dry-run root).
jutil() {
  _dryrun_record jutil "$@"
  if [ "$#" -eq 4 ] && [ "$1 $2 $3" = "env activate -p" ]; then
    export PROJECT="$DRYRUN_SITE_ROOT/p/project1/$4" SCRATCH="$DRYRUN_SITE_ROOT/p/scratch/$4"
  else
    echo "jutil (site dry-run stand-in): knows only 'jutil env activate -p <project>', not 'jutil $*'" >&2
    return 2
  fi
}
