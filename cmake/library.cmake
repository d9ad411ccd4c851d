# The embedding libraries, made of the layers' objects (no second compile):
#   crescent::crescent  libcrescent.a, every layer in one archive; its link interface carries
#                       LuaJIT (static), OpenBLAS, pthread, dl, m and the C++ runtime, so a C or
#                       C++ host links with one line (what the executable does).
#   crescent::shared    libcrescent.so.MAJOR.MINOR against Debian's shared LuaJIT (the static one
#                       is not PIC), for hosts in other languages (ctypes, cffi ...).
# and the install rules: the executable, both libraries, the headers, a CMake package
# (find_package(crescent)) and crescent.pc for pkg-config.
include(GNUInstallDirs)

set(CRESCENT_LIB_OBJECTS)
foreach(layer runtime capture jit lua)
  list(APPEND CRESCENT_LIB_OBJECTS $<TARGET_OBJECTS:crescent_${layer}>)
endforeach()
list(APPEND CRESCENT_LIB_OBJECTS $<TARGET_OBJECTS:crescent_prebuilt>)
set(CRESCENT_LIB_INCLUDE $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)

add_library(crescent_static STATIC ${CRESCENT_LIB_OBJECTS})
set_target_properties(crescent_static PROPERTIES OUTPUT_NAME crescent EXPORT_NAME crescent)
target_include_directories(crescent_static INTERFACE ${CRESCENT_LIB_INCLUDE})
target_link_libraries(crescent_static INTERFACE ${LUAJIT_STATIC} Threads::Threads ${CMAKE_DL_LIBS} m stdc++)
add_library(crescent::crescent ALIAS crescent_static)
set(CRESCENT_INSTALL_TARGETS crescent_static)

find_library(LUAJIT_SHARED NAMES libluajit-5.1.so)
option(CRESCENT_SHARED "Build libcrescent.so (needs the shared LuaJIT, libluajit-5.1.so)" ON)
if(CRESCENT_SHARED AND LUAJIT_SHARED AND NOT CRESCENT_SANITIZE AND NOT CRESCENT_FUZZ)
  add_library(crescent_shared SHARED ${CRESCENT_LIB_OBJECTS})
  set_target_properties(crescent_shared PROPERTIES OUTPUT_NAME crescent EXPORT_NAME shared
                        VERSION ${PROJECT_VERSION} SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  target_include_directories(crescent_shared INTERFACE ${CRESCENT_LIB_INCLUDE})
  target_link_libraries(crescent_shared PRIVATE ${LUAJIT_SHARED} Threads::Threads ${CMAKE_DL_LIBS} m)
  target_link_options(crescent_shared PRIVATE -Wl,--no-undefined)
  add_library(crescent::shared ALIAS crescent_shared)
  list(APPEND CRESCENT_INSTALL_TARGETS crescent_shared)
elseif(CRESCENT_SHARED)
  message(STATUS "libcrescent.so is not built (needs libluajit-5.1.so; not in a sanitizer or fuzz build)")
endif()

if(NOT CRESCENT_INSTALL)
  return()
endif()
set(CRESCENT_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/crescent)
install(TARGETS crescent RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(TARGETS ${CRESCENT_INSTALL_TARGETS} EXPORT crescentTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(FILES include/crescent/crescent.h include/crescent/crescent.hpp DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/crescent)
install(EXPORT crescentTargets NAMESPACE crescent:: DESTINATION ${CRESCENT_CMAKE_DIR})
include(CMakePackageConfigHelpers)
configure_package_config_file(cmake/crescentConfig.cmake.in ${PROJECT_BINARY_DIR}/crescentConfig.cmake
                              INSTALL_DESTINATION ${CRESCENT_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/crescentConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/crescentConfig.cmake ${PROJECT_BINARY_DIR}/crescentConfigVersion.cmake
        DESTINATION ${CRESCENT_CMAKE_DIR})

# crescent.pc: relative to its own place, so the tree may be installed under any prefix
file(RELATIVE_PATH CRESCENT_PC_PREFIX /root/${CMAKE_INSTALL_LIBDIR}/pkgconfig /root)
string(REGEX REPLACE "/$" "" CRESCENT_PC_PREFIX "${CRESCENT_PC_PREFIX}")
string(REPLACE ";" " -l" CRESCENT_PC_DEPS "-lpthread;dl;m;stdc++")
if(TARGET crescent_shared)  # -lcrescent is the shared library; --static lists what the archive needs
  set(CRESCENT_PC_LIBS "-L\${libdir} -lcrescent")
  set(CRESCENT_PC_PRIVATE "Requires.private: luajit\nLibs.private: ${CRESCENT_PC_DEPS}")
else()
  set(CRESCENT_PC_LIBS "-L\${libdir} -lcrescent ${LUAJIT_STATIC} ${CRESCENT_PC_DEPS}")
  set(CRESCENT_PC_PRIVATE "")
endif()
configure_file(cmake/crescent.pc.in ${PROJECT_BINARY_DIR}/crescent.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/crescent.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
