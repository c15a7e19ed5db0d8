"""The case list, names and selection, as Autobahn|Testsuite has them.

Ported from autobahntestsuite 25.10.1: autobahntestsuite/case/__init__.py
(the categories and the ordered `Cases` list) and caseset.py (a case's id
from its class name, "Case1_2_3" -> "1.2.3"; patterns such as "6.4.*").
Copyright (c) typedef int GmbH, Apache License 2.0. Upstream has no 8.x or
11.x cases.
"""

import re

from .case1 import *  # noqa: F401,F403
from .case2 import *  # noqa: F401,F403
from .case3 import *  # noqa: F401,F403
from .case4 import *  # noqa: F401,F403
from .case5 import *  # noqa: F401,F403
from .case6 import *  # noqa: F401,F403
from .case6 import Case6_X_X, Case6_X_X_CaseSubCategories
from .case7 import *  # noqa: F401,F403
from .case7 import Case7_7_X, Case7_9_X
from .case9 import *  # noqa: F401,F403
from .case9 import Case9_7_X, Case9_8_X
from .case10 import *  # noqa: F401,F403
from .case12 import Case12_X_X, Case12_X_X_CaseSubCategories, Case13_X_X, Case13_X_X_CaseSubCategories

CaseSetname = "websocket"

CaseBasename = "Case"

CaseCategories = {"0": "Handshake",
                  "1": "Framing",
                  "2": "Pings/Pongs",
                  "3": "Reserved Bits",
                  "4": "Opcodes",
                  "5": "Fragmentation",
                  "6": "UTF-8 Handling",
                  "7": "Close Handling",
                  "8": "Misc",
                  "9": "Limits/Performance",
                  "10": "Misc",
                  "12": "WebSocket Compression (different payloads)",
                  "13": "WebSocket Compression (different parameters)",
                  }

CaseSubCategories = {"1.1": "Text Messages",
                     "1.2": "Binary Messages",
                     "4.1": "Non-control Opcodes",
                     "4.2": "Control Opcodes",
                     "6.1": "Valid UTF-8 with zero payload fragments",
                     "6.2": "Valid UTF-8 unfragmented, fragmented on code-points and within code-points",
                     "6.3": "Invalid UTF-8 differently fragmented",
                     "6.4": "Fail-fast on invalid UTF-8",
                     "7.1": "Basic close behavior (fuzzer initiated)",
                     "7.3": "Close frame structure: payload length (fuzzer initiated)",
                     "7.5": "Close frame structure: payload value (fuzzer initiated)",
                     "7.7": "Close frame structure: valid close codes (fuzzer initiated)",
                     "7.9": "Close frame structure: invalid close codes (fuzzer initiated)",
                     "7.13": "Informational close information (fuzzer initiated)",
                     "9.1": "Text Message (increasing size)",
                     "9.2": "Binary Message (increasing size)",
                     "9.3": "Fragmented Text Message (fixed size, increasing fragment size)",
                     "9.4": "Fragmented Binary Message (fixed size, increasing fragment size)",
                     "9.5": "Text Message (fixed size, increasing chop size)",
                     "9.6": "Binary Text Message (fixed size, increasing chop size)",
                     "9.7": "Text Message Roundtrip Time (fixed number, increasing size)",
                     "9.8": "Binary Message Roundtrip Time (fixed number, increasing size)",
                     "9.9": "Text Message (unlimited size)",
                     "9.10": "Binary Message (unlimited size)",
                     "10.1": "Auto-Fragmentation"
                     }

Cases = []
Cases += [Case1_1_1, Case1_1_2, Case1_1_3, Case1_1_4, Case1_1_5, Case1_1_6, Case1_1_7, Case1_1_8]
Cases += [Case1_2_1, Case1_2_2, Case1_2_3, Case1_2_4, Case1_2_5, Case1_2_6, Case1_2_7, Case1_2_8]
Cases += [Case2_1, Case2_2, Case2_3, Case2_4, Case2_5, Case2_6, Case2_7, Case2_8, Case2_9, Case2_10, Case2_11]
Cases += [Case3_1, Case3_2, Case3_3, Case3_4, Case3_5, Case3_6, Case3_7]
Cases += [Case4_1_1, Case4_1_2, Case4_1_3, Case4_1_4, Case4_1_5]
Cases += [Case4_2_1, Case4_2_2, Case4_2_3, Case4_2_4, Case4_2_5]
Cases += [Case5_1, Case5_2, Case5_3, Case5_4, Case5_5, Case5_6, Case5_7, Case5_8, Case5_9, Case5_10,
          Case5_11, Case5_12, Case5_13, Case5_14, Case5_15, Case5_16, Case5_17, Case5_18, Case5_19, Case5_20]
Cases += [Case6_1_1, Case6_1_2, Case6_1_3]
Cases += [Case6_2_1, Case6_2_2, Case6_2_3, Case6_2_4]
Cases += [Case6_3_1, Case6_3_2]
Cases += [Case6_4_1, Case6_4_2, Case6_4_3, Case6_4_4]
Cases.extend(Case6_X_X)
CaseSubCategories.update(Case6_X_X_CaseSubCategories)
Cases += [Case7_1_1, Case7_1_2, Case7_1_3, Case7_1_4, Case7_1_5, Case7_1_6]
Cases += [Case7_3_1, Case7_3_2, Case7_3_3, Case7_3_4, Case7_3_5, Case7_3_6]
Cases += [Case7_5_1]
Cases.extend(Case7_7_X)
Cases.extend(Case7_9_X)
Cases += [Case7_13_1, Case7_13_2]
Cases += [Case9_1_1, Case9_1_2, Case9_1_3, Case9_1_4, Case9_1_5, Case9_1_6]
Cases += [Case9_2_1, Case9_2_2, Case9_2_3, Case9_2_4, Case9_2_5, Case9_2_6]
Cases += [Case9_3_1, Case9_3_2, Case9_3_3, Case9_3_4, Case9_3_5, Case9_3_6, Case9_3_7, Case9_3_8, Case9_3_9]
Cases += [Case9_4_1, Case9_4_2, Case9_4_3, Case9_4_4, Case9_4_5, Case9_4_6, Case9_4_7, Case9_4_8, Case9_4_9]
Cases += [Case9_5_1, Case9_5_2, Case9_5_3, Case9_5_4, Case9_5_5, Case9_5_6]
Cases += [Case9_6_1, Case9_6_2, Case9_6_3, Case9_6_4, Case9_6_5, Case9_6_6]
# this produces case 9.7.X and 9.8.X ... all come from one file
Cases.extend(Case9_7_X)
Cases.extend(Case9_8_X)
# upstream: "#Cases += [Case9_9_1]" (never run)
Cases += [Case10_1_1]
Cases.extend(Case12_X_X)
CaseSubCategories.update(Case12_X_X_CaseSubCategories)
Cases.extend(Case13_X_X)
CaseSubCategories.update(Case13_X_X_CaseSubCategories)


def caseClasstoId(klass):
    """Case1_2_3 => '1.2.3'"""
    return '.'.join(klass.__name__[len(CaseBasename):].split("_"))


def caseIdtoIdTuple(id):
    """'1.2.3' => (1, 2, 3)"""
    return tuple(int(x) for x in id.split('.'))


CasesById = {caseClasstoId(c): c for c in Cases}


def resolveCasePatternList(patterns):
    """The case ids that a list of patterns names: "*" stands for anything,
    and a pattern with one matches at the start of an id (re.match), as
    upstream's does ("1.*" names 1.1.1 ... 1.2.8; so does "1*" and 10.1.1
    with it). A pattern without "*" names the one case."""
    specCases = []
    for c in patterns:
        if c.find('*') >= 0:
            p = re.compile(c.replace('.', r'\.').replace('*', '.*'))
            t = [caseIdtoIdTuple(x) for x in CasesById if p.match(x)]
            specCases.extend('.'.join(map(str, h)) for h in sorted(t))
        else:
            if c not in CasesById:
                raise ValueError("no case %s" % c)
            specCases.append(c)
    return specCases


def parseSpecCases(cases, exclude):
    """The ids of `cases` less those of `exclude`, in case order."""
    c = set(resolveCasePatternList(cases)) - set(resolveCasePatternList(exclude))
    return ['.'.join(map(str, y)) for y in sorted(caseIdtoIdTuple(x) for x in c)]
