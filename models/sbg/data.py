"""Peptide MD data and the OpenMM target energy.

``prepare`` writes, per system, ``<system>/topology.pdb`` (written once, no timestamp),
``<system>/coordinates.npy`` (float32, (frames, atoms, 3), nm), ``<system>/energies.npy``
(float64, potential energy in kT of those float32 coordinates) and ``<system>/meta.json``
(force field, temperature, time step, frames...). ``.npy`` and the filtered PDB are byte-stable
(DCD and mdtraj HDF5 embed creation dates), and OpenMM's Reference platform (or the CPU platform
with one thread) is bitwise reproducible for a fixed integrator seed, so the same config gives
the same bytes.

Systems: alanine dipeptide (Ace-A-Nme) from the openmmtools test-system PDB with the paper's
amber99sbildn + OBC, and Ace-AAA-Nme (the paper's tetrapeptide) built offline by repeating the
dipeptide's alanine unit (rigid superposition of one peptide repeat onto the next), with the
paper's amber14 + OBC1 setting. A user's own trajectory (``.npy``/``.npz`` in nm, or any
mdtraj-readable file with a PDB topology) is converted to the same layout.
"""

from __future__ import annotations

import importlib.util
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

SYSTEM_FILES = ("topology.pdb", "coordinates.npy", "energies.npy", "meta.json")


@dataclass(frozen=True)
class ForceFieldSpec:
    files: tuple[str, ...]
    nonbonded: str  # "NoCutoff" or "CutoffNonPeriodic"
    cutoff_nm: float | None
    temperature_k: float


# The paper's settings (official openmm_energy.py): Ace-A-Nme in amber99sbildn/OBC without cutoff
# at 300 K; the larger peptides in amber14/OBC1, 2 nm non-periodic cutoff, 310 K.
FORCEFIELDS = {
    "amber99sbildn_obc": ForceFieldSpec(("amber99sbildn.xml", "amber99_obc.xml"), "NoCutoff", None, 300.0),
    "amber14_obc1": ForceFieldSpec(("amber14-all.xml", "implicit/obc1.xml"), "CutoffNonPeriodic", 2.0, 310.0),
}
SYSTEM_FORCEFIELD = {"aldp": "amber99sbildn_obc", "ace_aaa_nme": "amber14_obc1"}  # the paper's choices
BOLTZMANN_KJ_PER_MOL_K = 0.0083144626


def kt_kj_per_mol(temperature_k: float) -> float:
    return BOLTZMANN_KJ_PER_MOL_K * temperature_k


# ----------------------------------------------------------------------------- topologies


def _aldp_pdb_path() -> Path:
    origin = importlib.util.find_spec("openmmtools").origin  # the package ships the file; no import banner
    return Path(origin).parent / "data" / "alanine-dipeptide-gbsa" / "alanine-dipeptide.pdb"


def aldp_topology():
    """Ace-A-Nme (22 atoms) as (openmm Topology, positions in nm)."""
    from openmm import app

    pdb = app.PDBFile(str(_aldp_pdb_path()))
    return pdb.topology, np.array(pdb.getPositions(asNumpy=True)._value, dtype=np.float64)


def _kabsch(source: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rotation R and shift t with R @ source_i + t ~ target_i (least squares)."""
    cs, ct = source.mean(0), target.mean(0)
    u, _, vt = np.linalg.svd((source - cs).T @ (target - ct))
    d = np.sign(np.linalg.det(vt.T @ u.T))
    rot = vt.T @ np.diag([1.0, 1.0, d]) @ u.T
    return rot, ct - rot @ cs


def capped_alanine_topology(n_ala: int):
    """Ace-(Ala)_n-Nme built from the dipeptide: each new residue is the alanine moved by the
    rigid transform that maps one peptide repeat (C, N, CA) onto the next (C, N, CH3 of Nme)."""
    from openmm import app

    topology, xyz = aldp_topology()
    residues = list(topology.residues())
    index = {(r.name, a.name): a.index for r in residues for a in r.atoms()}
    rot, shift = _kabsch(
        xyz[[index["ACE", "C"], index["ALA", "N"], index["ALA", "CA"]]],
        xyz[[index["ALA", "C"], index["NME", "N"], index["NME", "C"]]],
    )
    new, coords = app.Topology(), []
    chain = new.addChain()
    placed: dict[tuple[int, str], object] = {}
    copies = [(residues[0], 0)] + [(residues[1], k) for k in range(n_ala)] + [(residues[2], n_ala - 1)]
    for number, (residue, times) in enumerate(copies):
        res = new.addResidue(residue.name, chain, id=str(number + 1))
        for atom in residue.atoms():
            placed[number, atom.name] = new.addAtom(atom.name, atom.element, res)
            p = xyz[atom.index]
            for _ in range(times):
                p = rot @ p + shift
            coords.append(p)
        for bond in residue.bonds():
            if bond[0].residue is residue and bond[1].residue is residue:
                new.addBond(placed[number, bond[0].name], placed[number, bond[1].name])
        if number:  # peptide bond to the previous residue
            new.addBond(placed[number - 1, "C"], placed[number, "N"])
    return new, np.array(coords)


def build_topology(system: str):
    if system == "aldp":
        return aldp_topology()
    if system == "ace_aaa_nme":
        return capped_alanine_topology(3)
    raise ValueError(f"unknown system {system!r}; choose from {sorted(SYSTEM_FORCEFIELD)}")


def pdb_text(topology, positions_nm: np.ndarray) -> str:
    """PDB text without OpenMM's dated REMARK header, so the file is byte-stable."""
    from openmm import app, unit

    buffer = io.StringIO()
    app.PDBFile.writeFile(topology, positions_nm * unit.nanometer, buffer, keepIds=True)
    return "".join(line + "\n" for line in buffer.getvalue().splitlines() if not line.startswith("REMARK"))


def read_topology(path: Path):
    from openmm import app

    return app.PDBFile(str(path)).topology


# ----------------------------------------------------------------------------- energy


def create_system(topology, forcefield: str):
    from openmm import app, unit

    spec = FORCEFIELDS[forcefield]
    kwargs = {
        "nonbondedMethod": getattr(app, spec.nonbonded),
        "constraints": None,
        "rigidWater": False,
        "removeCMMotion": False,
    }
    if spec.cutoff_nm is not None:
        kwargs["nonbondedCutoff"] = spec.cutoff_nm * unit.nanometer
    return app.ForceField(*spec.files).createSystem(topology, **kwargs)


def make_context(system, integrator, platform: str):
    import openmm

    plat = openmm.Platform.getPlatformByName(platform)
    # The CPU platform is bitwise reproducible only single-threaded (measured: two threads differ).
    properties = {"Threads": "1"} if platform == "CPU" else {}
    return openmm.Context(system, integrator, plat, properties)


class OpenMMEnergy:
    """U(x)/kT and its forces for a batch of conformations, from one OpenMM context (CPU)."""

    def __init__(self, topology, forcefield: str, platform: str = "Reference") -> None:
        import openmm

        self.forcefield = forcefield
        self.kt = kt_kj_per_mol(FORCEFIELDS[forcefield].temperature_k)
        self.n_atoms = topology.getNumAtoms()
        self.context = make_context(create_system(topology, forcefield), openmm.VerletIntegrator(0.001), platform)
        self.calls = 0

    def __call__(self, x_nm: np.ndarray, forces: bool = True) -> tuple[np.ndarray, np.ndarray]:
        """Energies (B,) in kT and forces -dU/dx/kT (B, atoms, 3) in 1/nm; +inf/0 where not finite."""
        x_nm = np.asarray(x_nm, dtype=np.float64).reshape(-1, self.n_atoms, 3)
        energy = np.full(len(x_nm), np.inf)
        force = np.zeros_like(x_nm)
        for i, x in enumerate(x_nm):
            if not np.isfinite(x).all():
                continue
            self.context.setPositions(x)
            state = self.context.getState(getEnergy=True, getForces=forces)
            e = state.getPotentialEnergy()._value / self.kt  # kJ/mol
            if np.isfinite(e):
                energy[i] = e
                if forces:
                    f = np.asarray(state.getForces(asNumpy=True)._value) / self.kt
                    force[i] = f if np.isfinite(f).all() else 0.0
        self.calls += len(x_nm)
        return energy, force


# ----------------------------------------------------------------------------- MD


def run_md(
    system: str,
    forcefield: str,
    steps: int,
    save_every: int,
    timestep_fs: float,
    friction_per_ps: float,
    minimise_iterations: int,
    equilibration_steps: int,
    seed: int,
    platform: str,
    progress=None,
):
    """Seeded Langevin MD; minimisation and equilibration are discarded. Returns (topology, frames nm, meta)."""
    import openmm
    from openmm import unit

    topology, start = build_topology(system)
    temperature = FORCEFIELDS[forcefield].temperature_k
    integrator = openmm.LangevinMiddleIntegrator(
        temperature * unit.kelvin, friction_per_ps / unit.picosecond, timestep_fs * unit.femtosecond
    )
    integrator.setRandomNumberSeed(1 + seed)  # 0 would mean "pick a random seed" in OpenMM
    context = make_context(create_system(topology, forcefield), integrator, platform)
    context.setPositions(start)
    openmm.LocalEnergyMinimizer.minimize(context, 1.0, minimise_iterations)
    context.setVelocitiesToTemperature(temperature * unit.kelvin, 1 + seed)
    integrator.step(equilibration_steps)
    frames = []
    chunks = range(steps // save_every)
    for _ in progress(chunks) if progress else chunks:
        integrator.step(save_every)
        frames.append(context.getState(getPositions=True).getPositions(asNumpy=True)._value)
    meta = {
        "system": system,
        "forcefield": forcefield,
        "forcefield_files": list(FORCEFIELDS[forcefield].files),
        "nonbonded": FORCEFIELDS[forcefield].nonbonded,
        "temperature_k": temperature,
        "timestep_fs": timestep_fs,
        "friction_per_ps": friction_per_ps,
        "save_every": save_every,
        "production_steps": steps,
        "equilibration_steps": equilibration_steps,
        "minimise_iterations": minimise_iterations,
        "seed": seed,
        "platform": platform,
        "integrator": "LangevinMiddleIntegrator",
        "constraints": None,
        "source": "openmm-md",
    }
    return topology, np.asarray(frames, dtype=np.float32), meta


# ----------------------------------------------------------------------------- user trajectories


def load_user_trajectory(trajectory: Path, topology_pdb: Path) -> tuple[object, np.ndarray]:
    """(openmm Topology, coordinates nm float32) from a user's files.

    ``.npy`` (frames, atoms, 3) or ``.npz`` (key ``positions``/``coordinates``/``xyz``, or its only
    array) in nanometres; anything else is read by mdtraj (``.xtc``, ``.dcd``, ``.h5``, ``.pdb``...)
    with the PDB as topology.
    """
    topology = read_topology(topology_pdb)
    suffix = Path(trajectory).suffix.lower()
    if suffix == ".npy":
        xyz = np.load(trajectory)
    elif suffix == ".npz":
        with np.load(trajectory) as archive:
            keys = [k for k in ("positions", "coordinates", "xyz") if k in archive] or list(archive.keys())
            if len(keys) != 1 and not any(k in archive for k in ("positions", "coordinates", "xyz")):
                raise ValueError(f"{trajectory}: several arrays {keys}; name the coordinates 'positions'")
            xyz = archive[keys[0]]
    else:
        import mdtraj

        xyz = mdtraj.load(str(trajectory), top=str(topology_pdb)).xyz
    xyz = np.asarray(xyz, dtype=np.float32)
    if xyz.ndim != 3 or xyz.shape[1:] != (topology.getNumAtoms(), 3):
        raise ValueError(
            f"{trajectory}: coordinates of shape {xyz.shape}, expected (frames, "
            f"{topology.getNumAtoms()}, 3) for topology {topology_pdb}"
        )
    if not np.isfinite(xyz).all():
        raise ValueError(f"{trajectory}: coordinates are not all finite")
    return topology, xyz


# ----------------------------------------------------------------------------- files


def write_system(folder: Path, topology, frames_nm: np.ndarray, meta: dict, platform: str) -> dict:
    """Write the four files of one system; energies are recomputed from the stored float32 frames."""
    folder.mkdir(parents=True, exist_ok=True)
    energy = OpenMMEnergy(topology, meta["forcefield"], platform)
    energies, _ = energy(frames_nm.astype(np.float64), forces=False)
    if not np.isfinite(energies).all():
        raise FloatingPointError(f"{meta['system']}: non-finite OpenMM energies in the trajectory")
    (folder / "topology.pdb").write_text(pdb_text(topology, frames_nm[0].astype(np.float64)))
    np.save(folder / "coordinates.npy", frames_nm)
    np.save(folder / "energies.npy", energies)
    meta = {
        **meta,
        "n_frames": int(len(frames_nm)),
        "n_atoms": int(frames_nm.shape[1]),
        "energy_unit": "kT",
        "length_unit": "nm",
        "mean_energy_kt": float(energies.mean()),
    }
    (folder / "meta.json").write_text(json.dumps(meta, indent=1, sort_keys=True))
    return meta


@dataclass
class PeptideData:
    """One system as read back: topology, frames (nm), energies (kT) and metadata."""

    system: str
    topology: object
    coordinates: np.ndarray
    energies: np.ndarray
    meta: dict


def read_system(root: Path, system: str) -> PeptideData:
    folder = Path(root) / system
    if not (folder / "coordinates.npy").is_file():
        available = sorted(p.parent.name for p in Path(root).glob("*/coordinates.npy"))
        raise FileNotFoundError(
            f"system {system!r} is not in the dataset at {root} (has: {available}); "
            f"add it to data.systems and prepare again"
        )
    return PeptideData(
        system,
        read_topology(folder / "topology.pdb"),
        np.load(folder / "coordinates.npy"),
        np.load(folder / "energies.npy"),
        json.loads((folder / "meta.json").read_text()),
    )


# ----------------------------------------------------------------------------- geometry


def backbone_dihedral_indices(topology) -> tuple[np.ndarray, np.ndarray]:
    """Atom quadruples of every backbone phi and psi (mdtraj's definitions), shapes (k, 4)."""
    import mdtraj

    traj = mdtraj.Trajectory(np.zeros((1, topology.getNumAtoms(), 3)), mdtraj.Topology.from_openmm(topology))
    return mdtraj.compute_phi(traj)[0], mdtraj.compute_psi(traj)[0]


def dihedrals(x: np.ndarray, quads: np.ndarray) -> np.ndarray:
    """Dihedral angles (batch, k) in (-pi, pi] of atom quadruples (k, 4) in conformations (batch, atoms, 3)."""
    p0, p1, p2, p3 = (x[:, quads[:, j]] for j in range(4))
    b1, b2, b3 = p1 - p0, p2 - p1, p3 - p2
    c1, c2 = np.cross(b2, b3), np.cross(b1, b2)  # IUPAC sign convention
    return np.arctan2((b1 * c1).sum(-1) * np.linalg.norm(b2, axis=-1), (c1 * c2).sum(-1))


def chiral_centres(topology) -> np.ndarray:
    """(N, CA, C, CB) atom indices of every residue that has all four (the L-amino-acid centres)."""
    centres = []
    for residue in topology.residues():
        names = {atom.name: atom.index for atom in residue.atoms()}
        if all(k in names for k in ("N", "CA", "C", "CB")):
            centres.append([names["N"], names["CA"], names["C"], names["CB"]])
    return np.array(centres, dtype=int).reshape(-1, 4)
