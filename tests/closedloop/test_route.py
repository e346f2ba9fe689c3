import numpy as np
import pytest

from tests.optional import importorskip

importorskip("highway_env")

from highway_env.road.lane import CircularLane, StraightLane
from highway_env.road.road import RoadNetwork

from blockplan.closedloop import route_command


def _network(left: bool) -> RoadNetwork:
    """20 m straight along highway-env +x, then a 90° arc of radius 10 m; highway-env's -y
    is REP-103's left."""
    net = RoadNetwork()
    net.add_lane("a", "b", StraightLane([0.0, 0.0], [20.0, 0.0]))
    if left:
        arc = CircularLane([20.0, -10.0], 10.0, np.pi / 2, 0.0, clockwise=False)
    else:
        arc = CircularLane([20.0, 10.0], 10.0, -np.pi / 2, 0.0, clockwise=True)
    net.add_lane("b", "c", arc)
    net.add_lane(
        "c",
        "d",
        StraightLane(
            arc.position(arc.length, 0),
            arc.position(arc.length, 0)
            + 30
            * np.array([np.cos(arc.heading_at(arc.length)), np.sin(arc.heading_at(arc.length))]),
        ),
    )
    return net


@pytest.mark.parametrize("left", [True, False])
def test_a_turn_on_the_route_ahead_is_commanded_with_rep103_sign(left):
    net = _network(left)
    route = [("a", "b", 0), ("b", "c", 0), ("c", "d", 0)]
    expected = "turn_left" if left else "turn_right"
    assert route_command(net, route, np.array([5.0, 0.0]), speed=5.0) == expected


def test_far_from_the_turn_or_without_route_it_is_lane_follow():
    net = _network(True)
    route = [("c", "d", 0)]
    end = net.get_lane(("c", "d", 0)).position(5.0, 0.0)
    assert route_command(net, route, end, speed=5.0) == "lane_follow"
    assert route_command(net, [], np.array([5.0, 0.0]), speed=5.0) == "lane_follow"
