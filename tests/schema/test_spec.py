import math

import pytest

from blockplan.schema import DrivingSchema, SchemaError, format_number
from blockplan.types import CRITICAL_OBJECT_KEYS, Lateral, Longitudinal


def test_defaults(schema):
    assert schema.explanation_budget == 24
    assert schema.meta_budget == 3
    assert schema.num_waypoints == 5
    assert schema.number_width == 7
    assert schema.max_abs_number == pytest.approx(999.99)
    assert schema.longitudinal_words == tuple(v.value for v in Longitudinal)
    assert schema.lateral_words == tuple(v.value for v in Lateral)
    assert schema.critical_object_keys == CRITICAL_OBJECT_KEYS


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"explanation_budget": 0}, "explanation_budget"),
        ({"meta_budget": 0}, "meta_budget"),
        ({"num_history": True}, "num_history"),
        ({"int_digits": 7}, "int_digits"),
        ({"history_period_s": 0.0}, "history_period_s"),
        ({"critical_object_keys": ("pedestrian",)}, "critical_object_keys"),
        ({"yes_word": "no"}, "yes_word"),
        ({"route_commands": ()}, "route_commands"),
        ({"null_token": "<|MASK|>"}, "special tokens"),
    ],
)
def test_bad_settings_name_the_field(kwargs, field):
    with pytest.raises(SchemaError, match=field):
        DrivingSchema(**kwargs)


def test_schema_is_hashable_and_frozen(schema):
    assert hash(schema) == hash(DrivingSchema())
    with pytest.raises(AttributeError):
        schema.explanation_budget = 3


@pytest.mark.parametrize(
    ("value", "text", "clamped"),
    [
        (14.7, "+014.70", False),
        (-3.456, "-003.46", False),
        (0.0, "+000.00", False),
        (-0.001, "+000.00", False),
        (-0.0, "+000.00", False),
        (999.99, "+999.99", False),
        (999.996, "+999.99", True),
        (-1500.0, "-999.99", True),
        (math.inf, "+999.99", True),
        (-math.inf, "-999.99", True),
    ],
)
def test_format_number(schema, value, text, clamped):
    assert format_number(value, schema) == (text, clamped)


def test_format_number_other_widths():
    schema = DrivingSchema(int_digits=2, frac_digits=1)
    assert format_number(-3.46, schema) == ("-03.5", False)
    assert format_number(120.0, schema) == ("+99.9", True)
    schema = DrivingSchema(int_digits=3, frac_digits=0)
    assert format_number(7.4, schema) == ("+007", False)


def test_format_number_rejects_nan(schema):
    with pytest.raises(SchemaError, match="NaN"):
        format_number(math.nan, schema)


def test_schema_dict_round_trip_through_json():
    import json

    from blockplan.schema import schema_from_dict, schema_to_dict

    schema = DrivingSchema(explanation_budget=192, route_commands=("lane_follow", "turn_left"))
    data = json.loads(json.dumps(schema_to_dict(schema)))
    assert data["route_commands"] == ["lane_follow", "turn_left"]
    again = schema_from_dict(data)
    assert again == schema and hash(again) == hash(schema)
    assert schema_from_dict({}) == DrivingSchema()
    with pytest.raises(SchemaError, match="'colour'"):
        schema_from_dict({"colour": "red"})
    with pytest.raises(SchemaError, match="meta_budget"):
        schema_from_dict({"meta_budget": "3"})
