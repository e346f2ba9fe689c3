"""Multi-camera pinhole renderer of the world state (numpy + PIL).

Per camera and per (2x supersampled) pixel the ray's hit on the flat ground is fixed in the
ego frame, because the camera is rigidly mounted: it is computed once. A frame then costs one
2-D rigid transform of those hit points into the world, a lookup in the ground texture
(asphalt, lane markings, grass; rasterised around the ego by `GroundTexture`), distance fog,
and the sky gradient where a ray does not reach the ground. Vehicles are drawn over it as
shaded 3-D boxes (a body and a glass cabin) in far-to-near order, clipped at the near plane
and back-face culled. The supersampled image is box-filtered down to the camera size.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from blockplan.sim.rig import Camera, Rig
from blockplan.sim.roadmap import GroundTexture, RoadMap
from blockplan.sim.world import KIND_VEHICLE, Box, Snapshot

SUPERSAMPLE = 2  # the box filter in _render_camera assumes 2
MAX_GROUND_RANGE_M = 150.0
MAX_BOX_RANGE_M = 110.0
FOG_DISTANCE_M = 120.0
NEAR_PLANE_M = 0.15
HAZE = np.array([196.0, 206.0, 218.0], np.float32)
ZENITH = np.array([92.0, 138.0, 204.0], np.float32)
GLASS = np.array([40.0, 52.0, 66.0], np.float32)
SHADOW = (38, 38, 40)
SUN = np.array([0.4, 0.3, 0.87])  # direction towards the sun, REP-103 world frame
SUN /= np.linalg.norm(SUN)

# Corner order of a box (see _box_corners): bottom ring FL, RL, RR, FR (counter-clockwise
# seen from above), then the top ring in the same order. Each face lists its corners
# counter-clockwise seen from outside, so its right-hand normal points outwards.
_BOX_FACES = (
    (0, 3, 2, 1),  # bottom
    (4, 5, 6, 7),  # top
    (0, 1, 5, 4),  # left
    (1, 2, 6, 5),  # rear
    (2, 3, 7, 6),  # right
    (3, 0, 4, 7),  # front
)
_FACE_INDEX = np.array(_BOX_FACES)  # (6, 4)


@dataclass(frozen=True)
class _CameraRays:
    """Constants of one camera: where each supersampled ray meets the ground."""

    camera: Camera
    ground_idx: np.ndarray  # (G,) flat indices of subpixels whose ray hits the ground
    ground_xy: np.ndarray  # (G, 2) hit points in base_link
    clear: np.ndarray  # (G, 1) float32: 1 - fog blend factor
    haze: np.ndarray  # (G, 3) float32: fog blend factor * haze colour
    sky: np.ndarray  # (Hs*Ws, 3) uint8 sky colour for every subpixel
    R_optical_from_base: np.ndarray  # (3, 3)


def _camera_rays(cam: Camera) -> _CameraRays:
    s = SUPERSAMPLE
    hs, ws = cam.height * s, cam.width * s
    u = (np.arange(ws) + 0.5) / s  # subpixel centres in pixel units
    v = (np.arange(hs) + 0.5) / s
    uu, vv = np.meshgrid(u, v)  # (Hs, Ws)
    d_opt = np.stack([(uu - cam.cx) / cam.fx, (vv - cam.cy) / cam.fy, np.ones_like(uu)], -1)
    d = d_opt.reshape(-1, 3) @ cam.R_base_from_optical.T  # (Hs*Ws, 3) in base_link
    horiz = np.hypot(d[:, 0], d[:, 1])
    lam = np.where(d[:, 2] < -1e-6, -cam.z / np.minimum(d[:, 2], -1e-6), np.inf)
    rng = lam * horiz
    hits = rng < MAX_GROUND_RANGE_M
    ground_idx = np.flatnonzero(hits)
    ground_xy = cam.position[:2] + lam[hits, None] * d[hits, :2]
    fog = (1.0 - np.exp(-rng[hits] / FOG_DISTANCE_M)).astype(np.float32)[:, None]
    elevation = np.arctan2(d[:, 2], horiz)
    w = np.clip(elevation / np.radians(35.0), 0.0, 1.0).astype(np.float32)[:, None]
    sky = (1.0 - w) * HAZE + w * ZENITH
    return _CameraRays(
        cam,
        ground_idx,
        ground_xy.astype(np.float32),
        1.0 - fog,
        fog * HAZE,
        sky.astype(np.uint8),
        cam.R_base_from_optical.T,
    )


TAIL_LIGHT = (215, 25, 20)
HEAD_LIGHT = (240, 235, 200)
FACE_REAR, FACE_FRONT = 3, 5  # indices into _BOX_FACES
PARTS_PER_VEHICLE, PARTS_PER_OBSTACLE = 7, 2


def _parts(boxes: list[Box]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The drawable parts of every box, far-to-near order preserved.

    Returns corners (P, 8, 3) in odom (bottom ring FL, RL, RR, FR, then the top ring),
    colours (P, 3) float32, is_cabin (P,) bool and only_face (P,) int (-1: all faces; else
    the one face a lamp shows). A vehicle is a shadow, a body, a glass cabin and four lamps
    (thin boxes just outside the body whose outer face alone is drawn, so they never show
    through the body); an obstacle is a shadow and one box.
    """
    rows = []  # (x, y, yaw, length, width, z0, z1, x_off, y_off, r, g, b, is_cabin, face)
    for b in boxes:
        rows.append(
            (b.x, b.y, b.yaw, b.length * 1.15, b.width * 1.1, 0.0, 0.02, 0.0, 0.0, *SHADOW, 0, -1)
        )
        if b.kind == KIND_VEHICLE:
            top = 0.3 + 0.6 * b.height / 1.5
            rows.append((b.x, b.y, b.yaw, b.length, b.width, 0.3, top, 0.0, 0.0, *b.color, 0, -1))
            rows.append(
                (
                    b.x,
                    b.y,
                    b.yaw,
                    b.length * 0.55,
                    b.width * 0.88,
                    top,
                    b.height,
                    -0.08 * b.length,
                    0.0,
                    *b.color,
                    1,
                    -1,
                )
            )
            lamp_y = b.width / 2 - 0.3
            for x_off, color, face in (
                (-b.length / 2 - 0.03, TAIL_LIGHT, FACE_REAR),
                (b.length / 2 + 0.03, HEAD_LIGHT, FACE_FRONT),
            ):
                for y_off in (lamp_y, -lamp_y):
                    rows.append(
                        (
                            b.x,
                            b.y,
                            b.yaw,
                            0.04,
                            0.4,
                            top - 0.25,
                            top - 0.08,
                            x_off,
                            y_off,
                            *color,
                            0,
                            face,
                        )
                    )
        else:
            rows.append(
                (b.x, b.y, b.yaw, b.length, b.width, 0.0, b.height, 0.0, 0.0, *b.color, 0, -1)
            )
    a = np.array(rows, dtype=np.float64)  # (P, 14)
    hl, hw = a[:, 3:4] / 2.0, a[:, 4:5] / 2.0
    lx = np.concatenate([hl, -hl, -hl, hl], 1) + a[:, 7:8]  # (P, 4) local x of the ring
    ly = np.concatenate([hw, hw, -hw, -hw], 1) + a[:, 8:9]
    c, s = np.cos(a[:, 2:3]), np.sin(a[:, 2:3])
    wx, wy = a[:, 0:1] + c * lx - s * ly, a[:, 1:2] + s * lx + c * ly  # (P, 4)
    z0, z1 = np.repeat(a[:, 5:6], 4, 1), np.repeat(a[:, 6:7], 4, 1)
    corners = np.stack(
        [np.concatenate([wx, wx], 1), np.concatenate([wy, wy], 1), np.concatenate([z0, z1], 1)],
        -1,
    )  # (P, 8, 3)
    return corners, a[:, 9:12].astype(np.float32), a[:, 12].astype(bool), a[:, 13].astype(int)


def _clip_near(poly: np.ndarray) -> np.ndarray:
    """Clip a polygon (N, 3) in optical coordinates to z >= NEAR_PLANE_M (Sutherland-Hodgman)."""
    out = []
    n = len(poly)
    for i in range(n):
        a, b = poly[i], poly[(i + 1) % n]
        a_in, b_in = a[2] >= NEAR_PLANE_M, b[2] >= NEAR_PLANE_M
        if a_in:
            out.append(a)
        if a_in != b_in:
            t = (NEAR_PLANE_M - a[2]) / (b[2] - a[2])
            out.append(a + t * (b - a))
    return np.array(out) if out else np.zeros((0, 3))


class RigRenderer:
    """Renders a `Snapshot` into every camera of a rig. One instance per episode (it holds the
    ground texture window of that episode's road)."""

    def __init__(self, rig: Rig, road: RoadMap, texture_resolution_m: float = 0.1) -> None:
        self.rig = rig
        self.texture = GroundTexture(road, resolution_m=texture_resolution_m)
        self._rays = tuple(_camera_rays(c) for c in rig.cameras)

    def render(self, snap: Snapshot) -> dict[str, np.ndarray]:
        """{camera name: (H, W, 3) uint8 RGB}."""
        self.texture.ensure(snap.ego.x, snap.ego.y)
        boxes = self._boxes_in_range(snap)
        return {r.camera.name: self._render_camera(r, snap, boxes) for r in self._rays}

    def _boxes_in_range(self, snap: Snapshot) -> list[Box]:
        near = [
            b for b in snap.boxes if np.hypot(b.x - snap.ego.x, b.y - snap.ego.y) < MAX_BOX_RANGE_M
        ]
        return near

    def _render_camera(self, rays: _CameraRays, snap: Snapshot, boxes: list[Box]) -> np.ndarray:
        cam, s = rays.camera, SUPERSAMPLE
        hs, ws = cam.height * s, cam.width * s
        ego = snap.ego
        c, si = np.cos(ego.yaw), np.sin(ego.yaw)
        rot = np.array([[c, si], [-si, c]], np.float32)
        world = rays.ground_xy @ rot + np.array([ego.x, ego.y], np.float32)  # (G, 2)
        ground = self.texture.sample(world) * rays.clear + rays.haze  # (G, 3) fogged
        buf = rays.sky.copy()  # (Hs*Ws, 3) uint8
        buf[rays.ground_idx] = np.minimum(ground, 255.0).astype(np.uint8)
        img = Image.fromarray(buf.reshape(hs, ws, 3))
        if boxes:
            self._draw_boxes(ImageDraw.Draw(img), rays, snap, boxes)
        a = np.asarray(img).astype(np.uint16)  # (Hs, Ws, 3)
        acc = a[0::s, 0::s] + a[1::s, 0::s] + a[0::s, 1::s] + a[1::s, 1::s]  # 2x2 box filter
        return (acc >> 2).astype(np.uint8)  # (H, W, 3)

    def _draw_boxes(
        self, draw: ImageDraw.ImageDraw, rays: _CameraRays, snap: Snapshot, boxes: list[Box]
    ) -> None:
        cam, ss, ego = rays.camera, SUPERSAMPLE, snap.ego
        c, si = np.cos(ego.yaw), np.sin(ego.yaw)
        R_base_from_odom = np.array([[c, si, 0.0], [-si, c, 0.0], [0.0, 0.0, 1.0]])
        R = rays.R_optical_from_base @ R_base_from_odom  # odom -> optical
        origin = np.array([ego.x, ego.y, 0.0]) + R_base_from_odom.T @ cam.position
        dist = np.array([np.hypot(b.x - origin[0], b.y - origin[1]) for b in boxes])
        order = np.argsort(-dist, kind="stable")  # painter's algorithm: far to near
        corners, colors, is_cabin, only_face = _parts([boxes[i] for i in order])
        parts_per_box = np.array(
            [
                PARTS_PER_VEHICLE if boxes[i].kind == KIND_VEHICLE else PARTS_PER_OBSTACLE
                for i in order
            ]
        )
        fog = 1.0 - np.exp(-np.repeat(dist[order], parts_per_box) / FOG_DISTANCE_M)  # (P,)
        pts = (corners - origin) @ R.T  # (P, 8, 3) optical
        z = pts[..., 2]
        u = cam.fx * pts[..., 0] / np.maximum(z, NEAR_PLANE_M) + cam.cx
        in_front = z >= NEAR_PLANE_M
        # a part is skipped when it is wholly behind the camera or wholly off one side
        off = (~in_front.any(1)) | (in_front.all(1) & ((u < 0).all(1) | (u > cam.width).all(1)))
        faces = pts[:, _FACE_INDEX]  # (P, 6, 4, 3)
        normals = np.cross(faces[:, :, 1] - faces[:, :, 0], faces[:, :, 2] - faces[:, :, 0])
        visible = np.einsum("pfk,pfk->pf", normals, faces[:, :, 0]) < 0.0  # (P, 6)
        visible &= (only_face[:, None] < 0) | (only_face[:, None] == np.arange(6))
        normals_world = normals @ R  # optical -> odom (R is orthonormal)
        normals_world /= np.linalg.norm(normals_world, axis=-1, keepdims=True) + 1e-12
        light = 0.55 + 0.45 * np.clip(normals_world @ SUN, 0.0, None)  # (P, 6)
        glass = is_cabin[:, None] & (np.abs(normals_world[..., 2]) < 0.5)  # (P, 6)
        base = np.where(glass[..., None], GLASS, colors[:, None, :])  # (P, 6, 3)
        rgb = (1 - fog[:, None, None]) * np.clip(base * light[..., None], 0, 255)
        rgb = (rgb + fog[:, None, None] * HAZE).astype(np.int64)
        for p in np.flatnonzero(~off):
            for f in np.flatnonzero(visible[p]):
                poly = faces[p, f]
                if (poly[:, 2] < NEAR_PLANE_M).any():
                    poly = _clip_near(poly)
                    if len(poly) < 3:
                        continue
                uu = (cam.fx * poly[:, 0] / poly[:, 2] + cam.cx) * ss
                vv = (cam.fy * poly[:, 1] / poly[:, 2] + cam.cy) * ss
                draw.polygon(
                    list(zip(uu.tolist(), vv.tolist(), strict=True)), fill=tuple(rgb[p, f].tolist())
                )
