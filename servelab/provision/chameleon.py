"""The Chameleon steps of a provisioning Plan, through python-chi (imported here only, never by dry_run).

python-chi is an optional extra (requirements-chameleon.txt). Every step is idempotent: the lease and the
server are looked up by name and reused, a floating IP is only attached when missing, and the node bootstrap
script skips what is already installed — so an interrupted run is resumed by running it again.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from servelab.provision.plan import BOOTSTRAP, Node, Plan, ProvisionError, bootstrap_command


def _chi():
    try:
        import chi
        import chi.lease
        import chi.server
    except ImportError as exc:
        raise ProvisionError(
            f"python-chi is not installed ({exc}): .venv/bin/pip install -r requirements-chameleon.txt"
        ) from None
    return chi


NO_REASON = "no reason given; see the lease/instance page at the site"

ADVICE = {"lease": "delete the lease (or pick another --lease-name) and retry; a node type with no free node also "
                   "ends here: try another node type, site or start time",
          "server": "delete the server (or pick another --server-name) and rerun: the lease is reused"}


def lease_reason(lease_json: dict) -> str:
    """Why a lease is not ACTIVE. Blazar keeps no reason on a lease: what it does keep is its events (a failed
    start_lease is in ERROR), whether a reservation lost its hosts, and the lease's `degraded` flag."""
    why = [f"{e.get('event_type', 'event')} {e['status']}" for e in lease_json.get("events") or []
           if e.get("status") == "ERROR"]
    for r in lease_json.get("reservations") or []:
        if r.get("missing_resources"):
            why.append(f"reservation {r.get('id', '?')} is missing resources (no free node of that type)")
        if r.get("resources_changed"):
            why.append(f"reservation {r.get('id', '?')} had its resources changed")
    if lease_json.get("degraded"):
        why.append("the lease is degraded")
    return "; ".join(why) or NO_REASON


def server_reason(nova_server) -> str:
    """Why a server is not ACTIVE: Nova's `fault` ({"message", "details", "code"}), present once it is in ERROR."""
    fault = getattr(nova_server, "fault", None)
    if isinstance(fault, dict):
        fault = fault.get("message") or fault.get("details")
    return str(fault) if fault else NO_REASON


def require_active(kind: str, name: str, status: str | None, reason) -> None:
    """python-chi's wait() returns when the status is ACTIVE *or ERROR*: check which, and stop with the reason
    (`reason()` asks the cloud only when there is one to give)."""
    status = str(status or "").upper()
    if status != "ACTIVE":
        raise ProvisionError(f"{kind} {name!r} is {status or 'in an unknown state'}, not ACTIVE: {reason()}; "
                             f"{ADVICE[kind]}")


class CloudLog(logging.Handler):
    """What python-chi logs at ERROR while a step runs: a refused lease is only logged there (`create_lease`
    logs Blazar's message and returns None, and `Lease.submit` raises a bare "Unable to make lease")."""

    def __init__(self):
        super().__init__(level=logging.ERROR)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())

    def __enter__(self) -> CloudLog:
        logging.getLogger("chi").addHandler(self)
        return self

    def __exit__(self, *exc) -> None:
        logging.getLogger("chi").removeHandler(self)


def submit_lease(lease, name: str) -> None:
    """Submit (or reuse) the lease and wait; a lease Blazar refuses stops here with Blazar's own words."""
    with CloudLog() as log:
        try:
            lease.submit(idempotent=True, wait_for_active=True, wait_timeout=1800, show=None)
        except Exception as exc:  # noqa: BLE001 - python-chi raises ResourceError(ResourceError(...)) here
            if not log.messages:
                raise
            raise ProvisionError(f"lease {name!r} was refused: {log.messages[-1]}; {ADVICE['lease']}") from exc


def run_plan(plan: Plan, log_fn=print, ssh_timeout: int = 900) -> Node:
    spec = plan.spec
    chi = _chi()
    step = "context"
    try:
        log_fn(f"[context] site {spec.site}, project {spec.project}")
        chi.use_site(spec.site)
        chi.set("project_name", spec.project)
        if spec.private_key:
            chi.set("keypair_private_key", spec.private_key)

        step = "lease"
        lease = chi.lease.Lease(spec.lease_name, duration=timedelta(hours=spec.hours))
        lease.add_node_reservation(amount=1, node_type=spec.node_type)
        submit_lease(lease, spec.lease_name)
        require_active("lease", spec.lease_name, lease.status, lambda: lease_reason(chi.blazar().lease.get(lease.id)))
        if not lease.node_reservations:
            raise ProvisionError(f"lease {spec.lease_name!r} has no node reservation: delete it or pick another name")
        reservation_id = lease.node_reservations[0]["id"]
        log_fn(f"[lease] {spec.lease_name} active (id {lease.id}, reservation {reservation_id})")

        step = "server"
        server = chi.server.Server(spec.server_name, reservation_id=reservation_id, image_name=spec.image,
                                   key_name=spec.key_name)
        server = server.submit(idempotent=True, wait_for_active=True, show=None) or server
        require_active("server", spec.server_name, server.status,
                       lambda: server_reason(chi.nova().servers.get(server.id)))
        log_fn(f"[server] {spec.server_name} active (id {server.id})")

        step = "floating-ip"
        ip = server.get_floating_ip()
        if not ip:
            server.associate_floating_ip()
            ip = server.get_floating_ip()
        if not ip:
            raise ProvisionError(f"no floating IP on {spec.server_name} after associating one")
        log_fn(f"[floating-ip] {ip}")

        step = "ssh"
        server.check_connectivity(host=ip, port=22, timeout=ssh_timeout, show=None)
        log_fn(f"[ssh] {spec.ssh_user}@{ip}:22 answers")

        step = "bootstrap"
        server.upload(str(BOOTSTRAP), "servelab_bootstrap.sh", user=spec.ssh_user)
        result = server.execute(bootstrap_command(spec, "servelab_bootstrap.sh"), user=spec.ssh_user)
        if getattr(result, "exited", 0) != 0:
            raise ProvisionError(f"node bootstrap exited {result.exited}; see its output above")
    except ProvisionError:
        raise
    except Exception as exc:  # noqa: BLE001 - name the step that failed, keep the cloud's message
        raise ProvisionError(f"{step} step failed: {type(exc).__name__}: {exc} (rerun to resume; every step "
                             "reuses what already exists)") from exc
    node = Node(spec=spec, floating_ip=ip, server_id=str(server.id or ""), lease_id=str(lease.id or ""))
    log_fn(f"[done] {node.ssh_command}\n       tunnel: {node.tunnel_command}")
    return node
