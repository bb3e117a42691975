"""A read script's output leaves the phone in one write (``frame_script(one_write=True)``):
the same text as the framed steps printed one by one, in one ADB packet, on real mksh and on
the simulated phone alike."""

from __future__ import annotations

import shutil
import subprocess

import pytest
from adb_shell.auth.sign_pythonrsa import PythonRSASigner

from android_bridge._reader import INT_COLUMNS, TEXT_COLUMNS
from android_bridge._shell import frame_script
from android_bridge.simulator import SimulatedPhone
from tests.simulator.sim_helpers import CLSE, OKAY, OPEN, WRTE, RawClient

#: Steps whose output a command substitution could spoil: a body's backslashes (``echo``
#: without ``-E`` would read them as escapes), an option-like first word, blank and trailing
#: lines, stderr, and exit statuses other than 0.
AWKWARD_STEPS = (
    "printf '%s\\n' '-n \\n \\c \\0101 tail'",
    "printf 'no newline at the end'",
    "printf 'blank lines after\\n\\n\\n'",
    "echo to-stderr >&2",
    "false",
    "ls /no/such/dir",
)


def _mksh(command: str) -> bytes:
    mksh = shutil.which("mksh")
    assert mksh is not None
    return subprocess.run(
        [mksh, "-c", command], capture_output=False, stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, check=False, timeout=60,
    ).stdout  # fmt: skip


@pytest.mark.skipif(shutil.which("mksh") is None, reason="needs mksh")
def test_real_mksh_prints_the_same_text_collected_as_step_by_step() -> None:
    """On real mksh, the collected script prints byte for byte what the plain one prints."""
    plain = frame_script(AWKWARD_STEPS, nonce="SBfixed")
    collected = frame_script(AWKWARD_STEPS, nonce="SBfixed", one_write=True)
    expected = _mksh(plain.command)
    assert expected == _mksh(collected.command)
    steps = collected.split(expected.decode())
    statuses = [step.exit_status for step in steps]
    assert [0, 0, 0, 0, 1] == statuses[:5] and statuses[5] != 0  # ls: 1 on toybox, 2 on GNU
    assert "-n \\n \\c \\0101 tail\n" == steps[0].output


async def _shell_packets(client: RawClient, command: str) -> tuple[bytes, int]:
    """Run ``command`` on a stream of its own: its output and how many WRTEs carried it."""
    await client.send(OPEN, 7, 0, f"shell:{command}\0".encode())
    kind, remote_id, _, _, _ = await client.read()
    assert OKAY == kind
    output, packets = b"", 0
    while True:
        kind, _, _, payload, _ = await client.read()
        if kind == CLSE:
            await client.send(CLSE, 7, remote_id)
            return output, packets
        assert WRTE == kind
        output += payload
        packets += 1
        await client.send(OKAY, 7, remote_id)


async def test_a_read_leaves_the_simulated_phone_in_one_packet_with_the_same_text(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """The reader's queries over rows with awkward bodies, collected: one WRTE, and the text
    the same steps print one by one in several (mksh's ``echo`` writes its whole buffer with
    one ``write(2)``, external/mksh ``funcs.c`` ``c_print``, R57 to R59c at android-10 to 15,
    and adbd sends what one read of the PTY gives as one WRTE)."""
    for body in ("two\nlines\n\n", "Row: 9 _id=1, body=x", "back\\slash \\n \\c", "-n"):
        phone.receive_sms("+12025550143", body)
    where = "_id > 0"
    steps = [
        f"content query --uri content://sms --projection {':'.join(INT_COLUMNS)}"
        f" --where '{where}' --sort '_id ASC'",
        *(
            f"content query --uri content://sms --projection _id:{column} --where '{where}'"
            " --sort '_id ASC' 2>/dev/null"
            for column in TEXT_COLUMNS
        ),
        *AWKWARD_STEPS,
    ]
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        plain, plain_packets = await _shell_packets(
            client, frame_script(steps, nonce="SBfixed").command
        )
        collected, packets = await _shell_packets(
            client, frame_script(steps, nonce="SBfixed", one_write=True).command
        )
    finally:
        client.close()
    assert plain == collected
    assert b"back\\slash \\n \\c" in collected
    assert 1 == packets
    assert plain_packets > 1


#: A command substitution over NUL bytes among the text and the trailing newlines.
NUL_SCRIPT = "x=$(printf 'a\\0b\\n\\0\\n\\n'); echo -E \"[$x]\""


@pytest.mark.skipif(shutil.which("mksh") is None, reason="needs mksh")
async def test_a_substitution_drops_nul_bytes_on_the_simulated_phone_as_mksh_does(
    phone: SimulatedPhone, adb_signer: PythonRSASigner
) -> None:
    """mksh drops every NUL byte a command substitution reads (so a collected read never
    shows one): external/mksh ``eval.c`` ``expand``, ``case XCOM`` (R57 at
    android-10.0.0_r30 to R59c at 15.0.0_r1); the simulated phone's shell does the same,
    never kinder."""
    expected = _mksh(NUL_SCRIPT)
    assert b"[ab]\n" == expected
    client = await RawClient.open(phone)
    try:
        await client.handshake(adb_signer, 0x01000001)
        output, _ = await _shell_packets(client, NUL_SCRIPT)
    finally:
        client.close()
    assert expected == output
