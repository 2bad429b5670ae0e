# loopwarden: stops tool-call loops. The shell hook (loopwarden/hooks/shellhook.py).
#
# Run by the agent for every hook event as
#     bash shellhook.sh N PYTHON-HOOK-COMMAND... AGENT [OPTIONS...]
# where the first N words after N start the Python hook command. It sends the event to
# the hook helper over its loopback HTTP port (the port and key are in the user's key
# file), with no Python start, and prints the helper's answer. Anything else, or anything
# unexpected, runs the Python hook command instead (with --http-port auto where that sets
# the port up for the next events): the answer is the same either way.
set -f
LC_ALL=C
n=$1
shift
cmd=("$@")
ev=$(cat)

# The Python hook command answers instead; `setup`: and it sets the port up (nothing
# listens there, the helper has an old key, or another program took it).
fallback() {
	{ exec 3<&-; } 2>/dev/null
	exec "${cmd[@]}" <<<"$ev"
}
setup() {
	{ exec 3<&-; } 2>/dev/null
	exec "${cmd[@]}" --http-port auto <<<"$ev"
}

case ${LOOPWARDEN_HOOK_DAEMON:-1} in
[0] | [Oo][Ff][Ff] | [Nn][Oo] | [Ff][Aa][Ll][Ss][Ee]) fallback ;;
esac
agent=${cmd[n]}
q=
for a in "${cmd[@]:n+1}"; do
	case $a in --no-daemon | --stop-daemon | -h | --help | --http-port*) fallback ;; esac
	e=
	for ((i = 0; i < ${#a}; i++)); do
		c=${a:i:1}
		case $c in
		[a-zA-Z0-9._~-]) e+=$c ;;
		*)
			printf -v c %%%02X "'$c"
			e+=$c
			;;
		esac
	done
	q+=${q:+&}arg=$e
done

d=${XDG_DATA_HOME-}
case $d:$OSTYPE in
/*) d=$d/loopwarden ;;
*:darwin*) d="$HOME/Library/Application Support/loopwarden" ;;
*) d=$HOME/.local/share/loopwarden ;;
esac
f=$d/http-hooks.json
[ -O "$f" ] || fallback
IFS= read -r k <"$f" || fallback
re='^\{"port": ([0-9]+), "token": "([0-9a-f]+)", "proof": "([0-9a-f]+)"\}$'
[[ $k =~ $re ]] || fallback
port=${BASH_REMATCH[1]}
tok=${BASH_REMATCH[2]}
proof=${BASH_REMATCH[3]}

nl=$'\n'
cr=$'\r'
h="POST /loopwarden/v1/run/$agent${q:+?$q} HTTP/1.1$cr${nl}Host: 127.0.0.1:$port$cr$nl"
h+="X-Loopwarden-Token: $tok$cr${nl}X-Loopwarden-Cwd: $PWD$cr$nl"
case $PWD in *"$cr"* | *"$nl"*) fallback ;; esac # (a header value cannot hold one)
for v in HOME LOOPWARDEN_AGENT_ID LOOPWARDEN_CONFIG LOOPWARDEN_LOG LOOPWARDEN_STATE \
	XDG_CONFIG_HOME XDG_DATA_HOME; do
	[ -n "${!v+x}" ] || continue
	case ${!v} in *"$cr"* | *"$nl"*) fallback ;; esac
	h+="X-Loopwarden-Env-$v: ${!v}$cr$nl"
done
h+="Content-Length: ${#ev}$cr${nl}Expect: 100-continue$cr${nl}Connection: close$cr$nl$cr$nl"

{ exec 3<>"/dev/tcp/127.0.0.1/$port"; } 2>/dev/null || setup
printf %s "$h" >&3 2>/dev/null || setup
# The helper says go on, with its proof, before the event is sent: a helper that is
# frozen, refuses the key (the Python hook gives it the new one) or is another program
# that took the port gets no event.
IFS= read -r -t 1 l <&3 || fallback
case $l in "HTTP/1.1 100 "*) ;; *) setup ;; esac
got=
while IFS= read -r -t 1 l <&3; do
	l=${l%"$cr"}
	[ -z "$l" ] && break
	case $l in "X-Loopwarden-Proof: "*) got=${l#*: } ;; esac
done
[ -n "$got" ] && [ "$got" = "$proof" ] || setup
printf %s "$ev" >&3 2>/dev/null || {
	echo "loopwarden: the hook helper went away; allowed" >&2
	printf '{}'
	exit 0
}

# From here the event may be recorded: it is never handed over a second time.
if ! IFS= read -r -t 20 l <&3; then
	echo "loopwarden: the hook helper did not answer; allowed" >&2
	printf '{}'
	exit 0
fi
case $l in
"HTTP/1.1 200 "*) ;;
"HTTP/1.1 503 "*) fallback ;; # declined (an upgrade): not recorded
*)
	echo "loopwarden: the hook helper failed (${l%"$cr"}); allowed" >&2
	printf '{}'
	exit 0
	;;
esac
len=0
code=0
out=0
while IFS= read -r -t 20 l <&3; do
	l=${l%"$cr"}
	[ -z "$l" ] && break
	case $l in
	"Content-Length: "*) len=${l#*: } ;;
	"X-Loopwarden-Exit: "*) code=${l#*: } ;;
	"X-Loopwarden-Stdout: "*) out=${l#*: } ;;
	esac
done
b=
[ "$len" -gt 0 ] && IFS= read -r -d '' -n "$len" -t 20 b <&3
printf %s "${b:0:out}"
[ "${#b}" -gt "$out" ] && printf %s "${b:out}" >&2
exit "$code"
